package idemtest

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The suite's checks. They are small on purpose: idemtest depends on the
// standard library's testing alone (as pgx's pgxtest does), so that a store
// author's module inherits no assertion library. Each check reports through
// t.Error (assert…, returning whether it held) or t.Fatal (require…); the
// trailing msgAndArgs is a format string and its arguments.

// report fails t with what went wrong, after the caller's message.
func report(t testing.TB, fatal bool, what string, msgAndArgs []any) {
	t.Helper()
	if len(msgAndArgs) > 0 {
		var m string
		if f, ok := msgAndArgs[0].(string); ok {
			m = fmt.Sprintf(f, msgAndArgs[1:]...)
		} else {
			m = fmt.Sprint(msgAndArgs...)
		}
		what = m + ": " + what
	}
	if fatal {
		t.Fatal(what)
	}
	t.Error(what)
}

// equal reports whether want and got are equal: byte slices by their bytes
// (a nil slice equals only a nil slice), everything else by
// reflect.DeepEqual.
func equal(want, got any) bool {
	w, ok := want.([]byte)
	if !ok {
		return reflect.DeepEqual(want, got)
	}
	g, ok := got.([]byte)
	if !ok {
		return false
	}
	if w == nil || g == nil {
		return w == nil && g == nil
	}
	return bytes.Equal(w, g)
}

func checkEqual(t testing.TB, fatal bool, want, got any, msgAndArgs []any) bool {
	t.Helper()
	if equal(want, got) {
		return true
	}
	report(t, fatal, fmt.Sprintf("got %#v (%T), want %#v (%T)", got, got, want, want), msgAndArgs)
	return false
}

func assertEqual(t testing.TB, want, got any, msgAndArgs ...any) bool {
	t.Helper()
	return checkEqual(t, false, want, got, msgAndArgs)
}

func requireEqual(t testing.TB, want, got any, msgAndArgs ...any) {
	t.Helper()
	checkEqual(t, true, want, got, msgAndArgs)
}

func checkTrue(t testing.TB, fatal, ok bool, what string, msgAndArgs []any) bool {
	t.Helper()
	if !ok {
		report(t, fatal, what, msgAndArgs)
	}
	return ok
}

func assertTrue(t testing.TB, ok bool, msgAndArgs ...any) bool {
	t.Helper()
	return checkTrue(t, false, ok, "got false, want true", msgAndArgs)
}

func requireTrue(t testing.TB, ok bool, msgAndArgs ...any) {
	t.Helper()
	checkTrue(t, true, ok, "got false, want true", msgAndArgs)
}

func assertFalse(t testing.TB, v bool, msgAndArgs ...any) bool {
	t.Helper()
	return checkTrue(t, false, !v, "got true, want false", msgAndArgs)
}

func requireFalse(t testing.TB, v bool, msgAndArgs ...any) {
	t.Helper()
	checkTrue(t, true, !v, "got true, want false", msgAndArgs)
}

func assertNoError(t testing.TB, err error, msgAndArgs ...any) bool {
	t.Helper()
	return checkTrue(t, false, err == nil, fmt.Sprintf("unexpected error: %v", err), msgAndArgs)
}

func requireNoError(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	checkTrue(t, true, err == nil, fmt.Sprintf("unexpected error: %v", err), msgAndArgs)
}

func requireError(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	checkTrue(t, true, err != nil, "got no error, want one", msgAndArgs)
}

func errorIs(err, target error) string {
	return fmt.Sprintf("error %v does not wrap %v", err, target)
}

func assertErrorIs(t testing.TB, err, target error, msgAndArgs ...any) bool {
	t.Helper()
	return checkTrue(t, false, errors.Is(err, target), errorIs(err, target), msgAndArgs)
}

func requireErrorIs(t testing.TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	checkTrue(t, true, errors.Is(err, target), errorIs(err, target), msgAndArgs)
}

func assertContains(t testing.TB, s, sub string, msgAndArgs ...any) bool {
	t.Helper()
	return checkTrue(t, false, strings.Contains(s, sub), fmt.Sprintf("%q does not contain %q", s, sub), msgAndArgs)
}

func checkOrder[T cmp.Ordered](t testing.TB, fatal, ok bool, a T, op string, b T, msgAndArgs []any) bool {
	t.Helper()
	return checkTrue(t, fatal, ok, fmt.Sprintf("got %v, want %s %v", a, op, b), msgAndArgs)
}

func assertGreater[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) bool {
	t.Helper()
	return checkOrder(t, false, a > b, a, ">", b, msgAndArgs)
}

func assertGreaterOrEqual[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) bool {
	t.Helper()
	return checkOrder(t, false, a >= b, a, ">=", b, msgAndArgs)
}

func requireGreaterOrEqual[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	checkOrder(t, true, a >= b, a, ">=", b, msgAndArgs)
}

func requireLess[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	checkOrder(t, true, a < b, a, "<", b, msgAndArgs)
}

func assertLessOrEqual[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) bool {
	t.Helper()
	return checkOrder(t, false, a <= b, a, "<=", b, msgAndArgs)
}

func requireLessOrEqual[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	checkOrder(t, true, a <= b, a, "<=", b, msgAndArgs)
}
