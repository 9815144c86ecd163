package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestRoundTrips counts network round trips per call through idem.Do, with
// warm statement caches: what a first call and a replay cost in each mode.
func TestRoundTrips(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			var rt rtCounter
			pool := newPool(t, 1, &rt)
			table := newTable(t, pool)
			newStore := func(parkIdle time.Duration) idem.Store {
				if mode == "tx" {
					tx := pgstore.NewTx(pool, pgstore.WithTable(table))
					// A replay's connection waits, parked, for the next
					// claim to send its COMMIT; its timer must not fire
					// between two calls of a slow machine (that COMMIT
					// would count here).
					tx.SetParkIdle(parkIdle)
					return tx
				}
				return pgstore.New(pool, pgstore.WithTable(table))
			}
			ex := idem.NewExecutor(newStore(time.Hour), idem.SingleTenant())
			m := &idem.Method{Op: "rt.Op", TTL: idemLedgerCredit.TTL}
			call := func(id string) {
				var k idem.KeyParts
				k.String("id", id)
				var h idem.Hasher
				h.String("payload")
				_, err := idem.Do(context.Background(), ex, m, &k, &h, func(context.Context) (int, error) { return 1, nil })
				if err != nil {
					t.Fatal(err)
				}
			}
			measure := func(id string) int64 {
				before := rt.n.Load()
				call(id)
				return rt.n.Load() - before
			}
			// Prepare the statements on the one connection: a first
			// call's, a replay's, and a claim's after a replay.
			warm := "warm-" + randHex(4)
			call(warm)
			call(warm)
			call("warm-" + randHex(4))
			// Several replays in a row, then a first call: a call costs
			// the same after replays (a replay must not cost the next
			// call on the connection a statement to prepare again).
			id := "rt-" + randHex(4)
			first := measure(id)
			replays := []int64{measure(id), measure(id), measure(id)}
			again := measure("rt-" + randHex(4))
			// Last: a replay in another process, whose store never saw
			// the key final (no hint: the claim's own plan). Its
			// transaction's connection, parked, is the pool's only one:
			// its timer returns it for the table's drop, long after the
			// call was measured.
			ex = idem.NewExecutor(newStore(time.Second), idem.SingleTenant())
			cold := measure(id)
			t.Logf("%s mode: %d round trips for a first call, %v for replays, %d for a first call after them, %d for a replay in another process",
				mode, first, replays, again, cold)
			want := map[string][2]int64{"lease": {2, 1}, "tx": {2, 1}}[mode]
			assert.Equal(t, want[0], first, "first call")
			assert.Equal(t, []int64{want[1], want[1], want[1]}, replays, "replays")
			assert.Equal(t, want[0], again, "first call after replays")
			assert.Equal(t, want[1], cold, "a replay in another process")
		})
	}
}
