// The race detector makes sync.Pool (pgx's buffers, the codec's encoder
// state) drop values at random, so allocation counts under it are not the
// program's: make test runs this file without -race, with the servers.

//go:build !race

package pgstore_test

import (
	"context"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// A cold replay is a retry that reaches a process whose store never saw
// the key final (no finals hint): behind a load balancer, the common
// replay. These tests pin what one costs the client, in allocations
// (testing.AllocsPerRun, exact counts, the lowest of coldRounds rounds, as
// runtime/idem's allocs_test.go pins memstore's) and in statements and
// round trips (a pgx tracer and a counting connection), against the floor:
// one SELECT of the record, scanned.

const (
	coldRuns   = 100 // calls AllocsPerRun averages
	coldRounds = 3   // rounds minCold takes the lowest of
)

// minCold is testing.AllocsPerRun(coldRuns, f) at its lowest of coldRounds
// rounds: a garbage collection during a round empties the sync.Pools of
// pgx and the runtime, whose refill is not the call's own cost.
func minCold(f func()) float64 {
	least := math.Inf(1)
	for range coldRounds {
		least = min(least, testing.AllocsPerRun(coldRuns, f))
	}
	return least
}

// coldKeys is one key per call minCold makes.
const coldKeys = coldRounds * (coldRuns + 1)

// coldMode is a store configuration whose cold replays are counted: mk
// returns a store on the table; claim claims as the executor does
// (ClaimTx for a TxStore).
type coldMode struct {
	name string
	mk   func(pool *pgxpool.Pool, table string) idem.Store
}

func coldModes() []coldMode {
	return []coldMode{
		{"lease", func(pool *pgxpool.Pool, table string) idem.Store {
			return pgstore.New(pool, pgstore.WithTable(table))
		}},
		{"tx", func(pool *pgxpool.Pool, table string) idem.Store {
			// A parked connection's timer must not commit it between two
			// calls (it would count here); it commits within a second of the last, before the table is dropped.
			s := pgstore.NewTx(pool, pgstore.WithTable(table))
			s.SetParkIdle(time.Second)
			return s
		}},
	}
}

// claimOnce claims req on s as the executor would, and returns the claim;
// a claimed key is a test failure (every key was decided).
func claimOnce(ctx context.Context, s idem.Store, req idem.ClaimRequest) (idem.Claim, error) {
	if ts, ok := s.(idem.TxStore); ok {
		c, txn, err := ts.ClaimTx(ctx, req, 0)
		if txn != nil {
			_ = txn.Release(ctx)
		}
		return c, err
	}
	return s.Claim(ctx, req)
}

// decideKeys stores a succeeded outcome for n keys through s.
func decideKeys(t *testing.T, s idem.Store, prefix string, n int) []idem.ClaimRequest {
	t.Helper()
	reqs := make([]idem.ClaimRequest, n)
	for i := range reqs {
		req := claimReq(key(t, "", prefix+strconv.Itoa(i)), "payload", time.Minute, time.Hour)
		c, h := claimFor(t, s, req, 0)
		require.True(t, c.Claimed)
		h.complete(t, `{"order_id":"o-1","status":"placed"}`)
		req.Token = newToken()
		reqs[i] = req
	}
	return reqs
}

// coldAllocs are the pinned client allocations of one cold replay of a
// store (Claim or ClaimTx, the record returned), beyond the floor's.
var coldAllocs = map[string]int{"lease": -4, "tx": 54}

// TestAllocsColdReplay: a cold replay's claim allocates, on the client,
// what the floor's SELECT of the record does plus the pinned difference;
// the test fails when it allocates more, and when it allocates fewer (then
// lower the pin, so that the gain is kept). The keys were decided by one
// store and are replayed by another on the same pool, once each.
func TestAllocsColdReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations")
	}
	for _, m := range coldModes() {
		t.Run(m.name, func(t *testing.T) {
			pool := newPool(t, 4, nil)
			table := newTable(t, pool)
			ctx := t.Context()
			reqs := decideKeys(t, m.mk(pool, table), "cold-", coldKeys+2)
			cold := m.mk(pool, table)
			// Warm the connections' statements and pgx's buffers: the
			// first two keys, not counted.
			for _, req := range reqs[:2] {
				c, err := claimOnce(ctx, cold, req)
				require.NoError(t, err)
				require.Equal(t, idem.StatusSucceeded, c.Record.Status)
			}
			reqs = reqs[2:]
			i := 0
			got := minCold(func() {
				c, err := claimOnce(ctx, cold, reqs[i])
				if err != nil || c.Claimed || c.Record.Status != idem.StatusSucceeded || c.Record.Fingerprint != reqs[i].Fingerprint {
					t.Fatalf("cold replay %d: %+v, %v", i, c, err)
				}
				i++
			})
			floor := minCold(func() {
				var (
					status int16
					body   []byte
				)
				err := pool.QueryRow(ctx, "SELECT status, body FROM "+pgx.Identifier{table}.Sanitize()+" WHERE key = $1::bytea AND expires_at > now()",
					reqs[0].Key.ID[:]).Scan(&status, &body)
				if err != nil || status != int16(idem.StatusSucceeded) {
					t.Fatalf("floor: %v", err)
				}
			})
			t.Logf("%s: a cold replay's claim allocates %v, the floor's SELECT %v", m.name, got, floor)
			want := coldAllocs[m.name]
			switch d := got - floor; {
			case d > float64(want):
				t.Errorf("cold replay: %v allocations beyond the floor's %v, want at most %d", d, floor, want)
			case d < float64(want):
				t.Errorf("cold replay: %v allocations beyond the floor's %v, fewer than the %d pinned: lower the pin", d, floor, want)
			}
		})
	}
}

// stmtTracer counts the statements pgx sends (queries, a batch's queries,
// prepares) and names them.
type stmtTracer struct {
	mu    sync.Mutex
	stmts []string
}

func (s *stmtTracer) add(sql string) {
	s.mu.Lock()
	s.stmts = append(s.stmts, sql)
	s.mu.Unlock()
}

func (s *stmtTracer) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stmts
	s.stmts = nil
	return out
}

func (s *stmtTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(d.SQL)
	return ctx
}

func (s *stmtTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *stmtTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *stmtTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.add(d.SQL)
}

func (s *stmtTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (s *stmtTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	s.add("PREPARE " + d.Name)
	return ctx
}

func (s *stmtTracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// coldStatements is what a cold replay sends in each mode, in one round
// trip: the statements pgx traces. Lease mode: the fast claim statement.
// Transactional mode: the COMMIT of the previous replay's parked
// transaction, probe, the insert, BEGIN and SAVEPOINT
// (docs/decisions/pgstore-hot-paths.md §2, §7).
var coldStatements = map[string]int{"lease": 1, "tx": 5}

// TestColdReplayStatements: a cold replay is one round trip, and sends the
// pinned number of statements (pgx's tracer), whether its connection is
// fresh from the pool or parked by the store's previous replay (tx).
func TestColdReplayStatements(t *testing.T) {
	for _, m := range coldModes() {
		t.Run(m.name, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
			require.NoError(t, err)
			cfg.MaxConns = 1
			tr := &stmtTracer{}
			cfg.ConnConfig.Tracer = tr
			var rt rtCounter
			countRoundTrips(cfg, &rt)
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			table := newTable(t, pool)
			reqs := decideKeys(t, m.mk(pool, table), "stmts-", 6)
			cold := m.mk(pool, table)
			// The first replay prepares the claim's statements on the
			// connection (once per connection), not counted.
			_, err = claimOnce(t.Context(), cold, reqs[0])
			require.NoError(t, err)
			for i, req := range reqs[1:] {
				tr.take()
				before := rt.n.Load()
				c, err := claimOnce(t.Context(), cold, req)
				require.NoError(t, err)
				require.Equal(t, idem.StatusSucceeded, c.Record.Status)
				stmts, trips := tr.take(), rt.n.Load()-before
				t.Logf("%s replay %d: %d round trips, %d statements %q", m.name, i, trips, len(stmts), stmts)
				assert.Equal(t, int64(1), trips, "round trips")
				assert.Len(t, stmts, coldStatements[m.name], "statements")
			}
		})
	}
}

// TestRawRowMatchesScan: a claim's reply decoded raw (binary results of
// described statements, see raw.go) answers what Rows.Scan answers (text
// results: a pool in QueryExecModeExec, whose parameters are also boxed
// one by one), for each kind of record a claim returns (a succeeded
// outcome with its meta, an empty body, a final failure with its code and
// message, a call in progress), cold (the claim's own statement: the fast
// claim, probe) and hinted (finalSQL), in lease and transactional mode.
func TestRawRowMatchesScan(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	raw := newPool(t, 4, nil)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	scan, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(scan.Close)
	outcomes := map[string]idem.Outcome{
		"succeeded": {Status: idem.StatusSucceeded, Body: []byte(`{"ok":true}`), Meta: []byte("trace=4bf92f3577b34da6a3ce929d0e0e4736")},
		"empty":     {Status: idem.StatusSucceeded, Body: []byte{}},
		"failed":    {Status: idem.StatusFailedFinal, ErrCode: "card_declined", ErrMessage: "the card was declined"},
	}
	for _, m := range coldModes() {
		t.Run(m.name, func(t *testing.T) {
			table := newTable(t, raw)
			decider := pgstore.New(raw, pgstore.WithTable(table))
			reqs := map[string]idem.ClaimRequest{}
			for name, out := range outcomes {
				req := claimReq(key(t, "tenant-a", "raw-"+name), "payload", time.Minute, time.Hour)
				c, err := decider.Claim(t.Context(), req)
				require.NoError(t, err)
				require.True(t, c.Claimed)
				require.NoError(t, decider.Complete(t.Context(), req.Key, req.Token, out, time.Hour))
				reqs[name] = req
			}
			held := claimReq(key(t, "tenant-a", "raw-held"), "payload", time.Minute, time.Hour)
			c, err := decider.Claim(t.Context(), held)
			require.NoError(t, err)
			require.True(t, c.Claimed)
			reqs["in progress"] = held
			a, b := m.mk(raw, table), m.mk(scan, table)
			for _, plan := range []string{"cold", "hinted"} {
				for name, req := range reqs {
					req.Token = newToken()
					ca := settledClaim(t, a, req)
					cb := settledClaim(t, b, req)
					require.False(t, ca.Claimed, "%s %s", plan, name)
					if name == "in progress" {
						assert.Equal(t, idem.StatusProcessing, ca.Record.Status)
						assert.Positive(t, ca.Record.LeaseLeft, "raw lease left")
						assert.Positive(t, cb.Record.LeaseLeft, "scanned lease left")
						assert.InDelta(t, float64(cb.Record.LeaseLeft), float64(ca.Record.LeaseLeft), float64(30*time.Second))
						ca.Record.LeaseLeft, cb.Record.LeaseLeft = 0, 0
					} else {
						want := outcomes[name]
						assert.Equal(t, want.Status, ca.Record.Outcome.Status, "%s %s", plan, name)
						assert.Equal(t, want.Body, ca.Record.Outcome.Body, "%s %s", plan, name)
						assert.Equal(t, want.Meta, ca.Record.Outcome.Meta, "%s %s", plan, name)
						assert.Equal(t, want.ErrCode, ca.Record.Outcome.ErrCode, "%s %s", plan, name)
						assert.Equal(t, want.ErrMessage, ca.Record.Outcome.ErrMessage, "%s %s", plan, name)
					}
					assert.Equal(t, cb, ca, "%s %s: raw and scanned answers", plan, name)
				}
			}
		})
	}
}

// settledClaim claims req on s until the answer is not "busy": in
// transactional mode, a claim of a key in progress takes the key's lock
// for a moment (probe, then the full claim statement) and commits in the
// background, so that the next claim may find the lock still held and be
// answered busy (a PROCESSING record without the holder's token) instead
// of the record.
func settledClaim(t *testing.T, s idem.Store, req idem.ClaimRequest) idem.Claim {
	t.Helper()
	var c idem.Claim
	require.Eventually(t, func() bool {
		var err error
		c, err = claimOnce(t.Context(), s, req)
		require.NoError(t, err)
		return c.Record.Status != idem.StatusProcessing || c.Record.Token != 0
	}, 10*time.Second, time.Millisecond)
	return c
}
