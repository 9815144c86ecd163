package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// A tenant that holds its share of the store is refused alone; another
// tenant's new key is claimed.
func ExampleWithTenantShare() {
	s := memstore.New(memstore.WithTenantShare(2))
	ctx := context.Background()
	claim := func(tenant, id string) error {
		k, err := idem.NewKey(tenant, "Orders.Pay", id)
		if err != nil {
			return err
		}
		_, err = s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Hour})
		return err
	}
	fmt.Println(claim("acme", "1"), claim("acme", "2"))
	err := claim("acme", "3")
	var q *idem.TenantQuotaError
	fmt.Println(errors.As(err, &q), q.Tenant, q.Share, errors.Is(err, idem.ErrStoreFull))
	fmt.Println(claim("globex", "1"))
	// Output:
	// <nil> <nil>
	// true acme 2 true
	// <nil>
}
