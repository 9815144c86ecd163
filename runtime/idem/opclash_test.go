package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestOpClaimedByOneMethod is the runtime half of issue 20.1: two methods
// under one operation name would share records (the second answered with
// the first one's outcome), so an executor refuses a second Func under an
// op it has seen, before anything is claimed, every time, and names both.
// The same Func in another descriptor, and a Method without Func
// (hand-written callers), are not refused.
func TestOpClaimedByOneMethod(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	payments := &idem.Method{Op: "Service.Capture", TTL: time.Minute, Func: "example.com/shop/payments.(*Service).Capture"}
	shipping := &idem.Method{Op: "Service.Capture", TTL: time.Minute, Func: "example.com/shop/shipping.(*Service).Capture"}
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return runs, nil }

	got, err := call(t.Context(), ex, payments, "ord-42", fn)
	require.NoError(t, err)
	assert.Equal(t, 1, got)

	for range 2 { // refused at first use, and again after
		got, err = call(t.Context(), ex, shipping, "ord-42", fn)
		require.ErrorIs(t, err, idem.ErrMisconfigured)
		assert.Zero(t, got)
		assert.Equal(t, 1, runs, "the method did not run")
		for _, want := range []string{`"Service.Capture"`, payments.Func, shipping.Func, "op="} {
			assert.Contains(t, err.Error(), want)
		}
	}

	// The first method keeps its op: a retry replays.
	got, err = call(t.Context(), ex, payments, "ord-42", fn)
	require.NoError(t, err)
	assert.Equal(t, 1, got)

	// The same method through another descriptor value, and a hand-written
	// caller without Func, are the same operation.
	same := *payments
	got, err = call(t.Context(), ex, &same, "ord-42", fn)
	require.NoError(t, err)
	assert.Equal(t, 1, got)
	hand := &idem.Method{Op: "Service.Capture", TTL: time.Minute}
	got, err = call(t.Context(), ex, hand, "ord-42", fn)
	require.NoError(t, err)
	assert.Equal(t, 1, got)

	// Another executor has its own view: the op is free there.
	other := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	got, err = call(t.Context(), other, shipping, "ord-42", fn)
	require.NoError(t, err)
	assert.Equal(t, 2, got)
}

// TestOpClaimedConcurrently: of two methods racing for one op at first use,
// exactly one is refused, whatever the order.
func TestOpClaimedConcurrently(t *testing.T) {
	for range 50 {
		ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
		a := &idem.Method{Op: "op", TTL: time.Minute, Func: "a.T.M"}
		b := &idem.Method{Op: "op", TTL: time.Minute, Func: "b.T.M"}
		errs := make(chan error, 2)
		for i, m := range []*idem.Method{a, b} {
			go func() {
				_, err := call(context.Background(), ex, m, string(rune('x'+i)), func(context.Context) (int, error) { return 0, nil })
				errs <- err
			}()
		}
		e1, e2 := <-errs, <-errs
		assert.True(t, (e1 == nil) != (e2 == nil), "one of %v, %v", e1, e2)
		assert.True(t, errors.Is(e1, idem.ErrMisconfigured) || errors.Is(e2, idem.ErrMisconfigured))
	}
}

// TestOpCheckKeptInTheMethod: the answer of the op check that an executor
// keeps for a Method it ran (so that its later calls skip the op map)
// never lets a colliding method through: not a copy of the Method whose
// Func was changed, not the Method itself moved to a taken Op, not on
// another executor that shares the Method, in any order of first use, not
// beyond the number of Methods an executor keeps; and a Method one
// executor prepared runs on another.
func TestOpCheckKeptInTheMethod(t *testing.T) {
	fn := func(context.Context) (int, error) { return 1, nil }
	const op, pay, ship = "Service.Capture", "example.com/payments.(*Service).Capture", "example.com/shipping.(*Service).Capture"
	for _, c := range []struct {
		name   string
		mutate func(m *idem.Method) *idem.Method // returns the descriptor of the second method
	}{
		{"a copy with another Func", func(m *idem.Method) *idem.Method { c := *m; c.Func = ship; return &c }},
		{"the same Method, Op changed to a taken op", func(m *idem.Method) *idem.Method { m.Op, m.Func = "Taken.Op", ship; return m }},
	} {
		t.Run(c.name, func(t *testing.T) {
			ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
			taken := &idem.Method{Op: "Taken.Op", TTL: time.Minute, Func: pay}
			_, err := call(t.Context(), ex, taken, "k", fn)
			require.NoError(t, err)
			m := &idem.Method{Op: op, TTL: time.Minute, Func: pay}
			for range 3 { // prepared by the first, kept after
				_, err = call(t.Context(), ex, m, "k", fn)
				require.NoError(t, err)
			}
			second := c.mutate(m)
			_, err = call(t.Context(), ex, second, "k2", fn)
			require.ErrorIs(t, err, idem.ErrMisconfigured)
		})
	}
	t.Run("more Methods than an executor keeps", func(t *testing.T) {
		ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
		const n = 4096 + 100
		ms := make([]*idem.Method, n)
		for i := range ms {
			ms[i] = &idem.Method{Op: fmt.Sprintf("Op%d", i), TTL: time.Minute, Func: pay}
			_, err := call(t.Context(), ex, ms[i], "k", fn)
			require.NoError(t, err)
		}
		for _, i := range []int{0, n - 1} {
			_, err := call(t.Context(), ex, ms[i], "k", fn)
			require.NoError(t, err, "Method %d again", i)
			_, err = call(t.Context(), ex, &idem.Method{Op: ms[i].Op, TTL: time.Minute, Func: ship}, "k", fn)
			require.ErrorIs(t, err, idem.ErrMisconfigured, "another method under Method %d's op", i)
		}
	})
	t.Run("two executors share a Method", func(t *testing.T) {
		a := idem.NewExecutor(memstore.New(), idem.SingleTenant())
		b := idem.NewExecutor(memstore.New(), idem.SingleTenant())
		m := &idem.Method{Op: op, TTL: time.Minute, Func: pay}
		other := &idem.Method{Op: op, TTL: time.Minute, Func: ship}
		for range 2 {
			_, err := call(t.Context(), a, m, "k", fn)
			require.NoError(t, err, "a runs m, prepared by a")
		}
		_, err := call(t.Context(), b, other, "k", fn) // b's op is other's
		require.NoError(t, err)
		for range 2 {
			_, err = call(t.Context(), b, m, "k", fn)
			require.ErrorIs(t, err, idem.ErrMisconfigured, "b has run another method under the op: m's preparation by a says nothing for b")
			_, err = call(t.Context(), a, m, "k", fn)
			require.NoError(t, err)
			_, err = call(t.Context(), a, other, "k", fn)
			require.ErrorIs(t, err, idem.ErrMisconfigured)
		}
	})
}
