package pgstore_test

import (
	"context"
	"testing"

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
			var store idem.Store = pgstore.New(pool, pgstore.WithTable(table))
			if mode == "tx" {
				store = pgstore.NewTx(pool, pgstore.WithTable(table))
			}
			ex := idem.NewExecutor(store, idem.SingleTenant())
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
			call("warm-" + randHex(4)) // prepares the statements on the one connection
			call("warm-" + randHex(4))
			// Several replays in a row, then a first call: a call costs
			// the same after replays (in transactional mode a replay's
			// batch fails on purpose, and must not cost the next call on
			// the connection a statement to prepare again).
			id := "rt-" + randHex(4)
			first := measure(id)
			replays := []int64{measure(id), measure(id), measure(id)}
			again := measure("rt-" + randHex(4))
			t.Logf("%s mode: %d round trips for a first call, %v for replays, %d for a first call after them", mode, first, replays, again)
			want := map[string][2]int64{"lease": {2, 1}, "tx": {2, 1}}[mode]
			assert.Equal(t, want[0], first, "first call")
			assert.Equal(t, []int64{want[1], want[1], want[1]}, replays, "replays")
			assert.Equal(t, want[0], again, "first call after replays")
		})
	}
}
