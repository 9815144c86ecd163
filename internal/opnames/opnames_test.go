package opnames_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/opnames/payments"
	"github.com/idemgen/idemgen/internal/opnames/shipping"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestTwoPackagesOneExecutor: payments.(*Service).Capture and
// shipping.(*Service).Capture, both //idem:key=orderID, on one executor (as
// the README shows: one per process). Each runs once for ord-42 and is
// answered from its own record on a retry; before issue 20.1 the shipping
// call returned the payments call's outcome without running.
func TestTwoPackagesOneExecutor(t *testing.T) {
	ctx := context.Background()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	pay, ship := &payments.Service{}, &shipping.Service{}
	p := payments.NewIdempotentService(pay, ex)
	s := shipping.NewIdempotentService(ship, ex)

	for range 2 {
		got, err := p.Capture(ctx, "ord-42")
		require.NoError(t, err)
		assert.Equal(t, "payments captured ord-42", got)
		got, err = s.Capture(ctx, "ord-42")
		require.NoError(t, err)
		assert.Equal(t, "shipping captured ord-42", got)
	}
	assert.Equal(t, 1, pay.Runs, "payments ran once, then replayed")
	assert.Equal(t, 1, ship.Runs, "shipping ran once, then replayed its own outcome")
}
