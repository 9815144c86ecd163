package tiered_test

import (
	"context"
	"log"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// Redis in front of PostgreSQL for a money path: retries of finished calls
// are answered by Redis, every claim is decided by PostgreSQL, and a Redis
// outage only costs latency.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	durable := pgstore.New(pool)
	if err := durable.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: "redis:6379"})
	defer client.Close()

	store := tiered.New(redisstore.New(client), durable,
		tiered.WithFastTimeout(50*time.Millisecond),
		tiered.WithObserver(func(ev tiered.Event) {
			if ev.Kind == tiered.EventDegraded {
				slog.Warn("idempotency: Redis is down, serving from PostgreSQL alone", "err", ev.Err)
			}
		}))
	ex := idem.NewExecutor(store, idem.SingleTenant())
	_ = ex // pass ex to the generated wrappers: NewIdempotentBillingService(svc, ex)
}
