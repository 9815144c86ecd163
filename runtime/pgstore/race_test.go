package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestRaceThroughWrapper: 64 goroutines × 50 keys through the generated
// wrapper, in each mode. Every eighth goroutine sends another payload for the
// same keys. The business table must get exactly one row per key, and every
// caller must get that row, or ErrInProgress, or ErrPayloadMismatch when its
// payload is not the one that ran.
func TestRaceThroughWrapper(t *testing.T) {
	const goroutines, keys = 64, 50
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			pool := newPool(t, goroutines+8, nil)
			table := newTable(t, pool)
			var store idem.Store = pgstore.New(pool, pgstore.WithTable(table))
			if mode == "tx" {
				store = pgstore.NewTx(pool, pgstore.WithTable(table))
			}
			ledger := newLedger(t, pool)
			svc := NewIdempotentLedger(ledger, idem.NewExecutor(store, idem.SingleTenant()))
			prefix := randHex(4)
			noWait := idemLedgerCredit
			noWait.Wait = 0
			retries0 := retriesOf(store)

			type result struct {
				req CreditRequest
				e   Entry
				err error
			}
			results := make([][]result, goroutines)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := range goroutines {
				wg.Go(func() {
					<-start
					order := rand.Perm(keys)
					for _, k := range order {
						req := CreditRequest{ID: fmt.Sprintf("%s-%d", prefix, k), Amount: int64(k + 1)}
						if g%8 == 7 {
							req.Amount += 100 // another payload, same key
						}
						m := &idemLedgerCredit
						if g%4 == 1 {
							m = &noWait // ErrInProgress while the first call runs
						}
						e, err := svc.credit(context.Background(), m, req)
						results[g] = append(results[g], result{req, e, err})
					}
				})
			}
			close(start)
			wg.Wait()

			rows := ledger.rows(t)
			require.Len(t, rows, keys, "one business row per key")
			var replayed, inProgress, mismatch int
			for id, es := range rows {
				require.Len(t, es, 1, "key %s: exactly one business row", id)
			}
			for g, rs := range results {
				for _, r := range rs {
					row := rows[r.req.ID][0]
					switch {
					case r.err == nil:
						assert.Equal(t, row, r.e, "goroutine %d, key %s: the result is the business row", g, r.req.ID)
						assert.Equal(t, row.Amount, r.req.Amount, "goroutine %d, key %s: only the payload that ran succeeds", g, r.req.ID)
						replayed++
					case errors.Is(r.err, idem.ErrInProgress):
						inProgress++
					case errors.Is(r.err, idem.ErrPayloadMismatch):
						assert.NotEqual(t, row.Amount, r.req.Amount, "goroutine %d, key %s: mismatch only for another payload", g, r.req.ID)
						mismatch++
					default:
						t.Errorf("goroutine %d, key %s: unexpected error %v", g, r.req.ID, r.err)
					}
				}
			}
			t.Logf("%s: claim statements re-run after a concurrent commit: %d", mode, retriesOf(store)-retries0)
			t.Logf("%s: %d calls: %d results, %d in progress, %d payload mismatches", mode,
				goroutines*keys, replayed, inProgress, mismatch)
			var records int
			require.NoError(t, pool.QueryRow(context.Background(),
				"SELECT count(*) FROM "+pgstore.New(pool, pgstore.WithTable(table)).Table()+" WHERE status = 2").Scan(&records))
			assert.Equal(t, keys, records, "one SUCCEEDED record per key")
		})
	}
}

// retriesOf returns the claim re-runs of a lease-mode or transactional store.
func retriesOf(s idem.Store) int64 {
	switch s := s.(type) {
	case *pgstore.Store:
		return s.ClaimRetries()
	case *pgstore.TxStore:
		return s.ClaimRetries()
	}
	return 0
}
