package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestCallScoped: a value kept with CallScoped belongs to one run of one
// idempotent call: the same value within the run (nested contexts
// included), none outside a call, a fresh one on a retry of the call and
// in a nested call.
func TestCallScoped(t *testing.T) {
	type k struct{}
	type other struct{}
	mk := func() any { return new(int) }
	if _, ok := idem.CallScoped(t.Context(), k{}, mk); ok {
		t.Fatal("a value outside an idempotent call")
	}
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := idem.Method{Op: "scoped", TTL: time.Minute}
	var seen []*int
	run := func(fail bool) {
		var parts idem.KeyParts
		parts.String("id", "1")
		var h idem.Hasher
		h.String("1")
		_, _ = idem.Do(t.Context(), ex, &m, &parts, &h, func(ctx context.Context) (int, error) {
			a, _ := idem.CallScoped(ctx, k{}, mk)
			b, _ := idem.CallScoped(context.WithValue(ctx, other{}, 1), k{}, mk)
			if a != b {
				t.Error("two values in one run")
			}
			seen = append(seen, a.(*int))
			inner := idem.Method{Op: "inner", TTL: time.Minute}
			_, _ = idem.Do(ctx, ex, &inner, &parts, &h, func(ctx context.Context) (int, error) {
				if c, _ := idem.CallScoped(ctx, k{}, mk); c == a {
					t.Error("a nested call shares its caller's value")
				}
				return 0, nil
			})
			if fail {
				return 0, context.DeadlineExceeded // transient: released
			}
			return 1, nil
		})
	}
	run(true)
	run(false)
	if len(seen) != 2 || seen[0] == seen[1] {
		t.Errorf("values of two runs %p, want two different", seen)
	}
}
