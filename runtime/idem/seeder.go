package idem

import (
	"context"
	"time"
)

// Seeder is an optional interface for stores that can take in a completed
// record decided elsewhere. The tiered store (runtime/tiered) uses it to
// copy the outcome that its durable tier accepted into its fast tier, and to
// repair a record that the fast tier lost (a Redis failover or eviction)
// from the durable tier. The executor never calls it.
type Seeder interface {
	// Seed stores rec, a final record (rec.Status and rec.Outcome.Status
	// both StatusSucceeded, or both StatusFailedFinal) as another store
	// returned it, as the record of key: its fingerprint, scheme, token and
	// outcome, to expire ttl from the store's now (rec.LeaseLeft is
	// ignored). It replaces an absent or PROCESSING record whatever its
	// token; a final record already there is kept unchanged (Seed returns
	// nil): the first stored outcome of a record wins.
	Seed(ctx context.Context, key Key, rec Record, ttl time.Duration) error
}
