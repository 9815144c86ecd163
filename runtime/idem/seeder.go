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
	// Seed stores out (StatusSucceeded or StatusFailedFinal) as the record
	// of key, with fingerprint fp and token, to expire ttl from the store's
	// now. It replaces an absent or PROCESSING record whatever its token;
	// a final record already there is kept unchanged (Seed returns nil):
	// the first stored outcome of a record wins.
	Seed(ctx context.Context, key Key, fp Fingerprint, token Token, out Outcome, ttl time.Duration) error
}
