package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// A wrapped method on Redis. The executor claims the key in one script,
// runs the method once and stores its result; the retry replays it. (The
// wrapper below is what idemgen generates for //idem:key=orderID.)
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	ex := idem.NewExecutor(redisstore.New(client, redisstore.WithPrefix("billing:")), idem.SingleTenant())

	m := idem.Method{Op: "Billing.Pay", TTL: 24 * time.Hour}
	pay := func(ctx context.Context, orderID string, cents int64) (string, error) {
		var k idem.KeyParts
		k.String("orderID", orderID)
		var h idem.Hasher
		h.String(orderID)
		h.Int(cents)
		return idem.Do(ctx, ex, &m, &k, &h, func(ctx context.Context) (string, error) {
			return "receipt for " + orderID, nil // charge the card here
		})
	}
	ctx := context.Background()
	r1, err := pay(ctx, "order-42", 1999)
	if err != nil {
		fmt.Println(err)
		return
	}
	r2, _ := pay(ctx, "order-42", 1999) // a retry: replayed, not charged again
	fmt.Println(r1 == r2)
}

// A multi-tenant service caps what one tenant creates per day, the records'
// TTL: a tenant past 100,000 new keys a day is refused alone
// (*idem.TenantQuotaError, HTTP 429 through idemhttp) while the others go on.
func ExampleWithTenantShare() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store := redisstore.New(client, redisstore.WithTenantShare(100_000, 24*time.Hour))
	tenantOf := func(ctx context.Context) string { return "acme" } // the authenticated account
	ex := idem.NewExecutor(store, idem.WithTenant(tenantOf))
	_ = ex
}
