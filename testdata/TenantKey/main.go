// TenantKey: a tenant key part; every key is scoped by tenant anyway, so
// the part makes a call without a tenant fail closed (idem.ErrMissingKey).
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type tenantKey struct{}

type Invoices struct{ issued int }

//idem:key=tenant+number ttl=1h
func (i *Invoices) Issue(ctx context.Context, number string) (int, error) {
	i.issued++
	return i.issued, nil
}

func main() {
	inv := &Invoices{}
	w := NewIdempotentInvoices(inv, idem.NewExecutor(memstore.New(), idem.WithTenant(func(ctx context.Context) string {
		s, _ := ctx.Value(tenantKey{}).(string)
		return s
	})))
	acme := context.WithValue(context.Background(), tenantKey{}, "acme")
	globex := context.WithValue(context.Background(), tenantKey{}, "globex")
	for _, ctx := range []context.Context{acme, acme, globex} {
		n, err := w.Issue(ctx, "INV-1")
		fmt.Println("issue INV-1 for", ctx.Value(tenantKey{}), "->", n, err)
	}
	_, err := w.Issue(context.Background(), "INV-1")
	fmt.Println("no tenant:", errors.Is(err, idem.ErrMissingKey), err)
}
