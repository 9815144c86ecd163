package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// errTracer records every statement the server answered with an error
// (a *pgconn.PgError): each is an ERROR line in the server's log.
type errTracer struct {
	mu   sync.Mutex
	errs []string
}

func (e *errTracer) add(sql string, err error) {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		e.mu.Lock()
		e.errs = append(e.errs, fmt.Sprintf("%s %s (%.60q)", pgErr.Code, pgErr.Message, sql))
		e.mu.Unlock()
	}
}

func (e *errTracer) failed() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.errs...)
}

type sqlKey struct{}

func (e *errTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, d.SQL)
}

func (e *errTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(sqlKey{}).(string)
	e.add(sql, d.Err)
}

func (e *errTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (e *errTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	e.add(d.SQL, d.Err)
}

func (e *errTracer) TraceBatchEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	e.add("batch", d.Err)
}

func (e *errTracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, d.SQL)
}

func (e *errTracer) TracePrepareEnd(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	sql, _ := ctx.Value(sqlKey{}).(string)
	e.add(sql, d.Err)
}

// tracedPool is a pool on the test server whose statements errTracer sees.
func tracedPool(t testing.TB, maxConns int32) (*pgxpool.Pool, *errTracer) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	tr := &errTracer{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, tr
}

// footprintStore is one store configuration of TestNoServerErrors: claim
// runs a claim as the executor would (ClaimTx for a TxStore, with wait),
// and end completes (or releases) what it claimed.
type footprintStore struct {
	name string
	// newStores returns two stores on one table: a and b act as two
	// processes (b's duplicates cannot be answered from a's memory).
	newStores func(t *testing.T, pool *pgxpool.Pool) (a, b idem.Store)
}

type held struct {
	store idem.Store
	txn   idem.Txn
	req   idem.ClaimRequest
}

func claimFor(t *testing.T, s idem.Store, req idem.ClaimRequest, wait time.Duration) (idem.Claim, *held) {
	t.Helper()
	if ts, ok := s.(idem.TxStore); ok {
		c, txn, err := ts.ClaimTx(t.Context(), req, wait)
		require.NoError(t, err)
		require.Equal(t, c.Claimed, txn != nil)
		return c, &held{store: s, txn: txn, req: req}
	}
	c, err := s.Claim(t.Context(), req)
	require.NoError(t, err)
	return c, &held{store: s, req: req}
}

func (h *held) complete(t *testing.T, body string) {
	t.Helper()
	if h.txn != nil {
		require.NoError(t, h.txn.Complete(t.Context(), succeeded(body), time.Hour, false))
		return
	}
	require.NoError(t, h.store.Complete(t.Context(), h.req.Key, h.req.Token, succeeded(body), time.Hour))
}

func footprintStores() []footprintStore {
	two := func(mk func(pool *pgxpool.Pool, table string) idem.Store, opts ...pgstore.Option) func(t *testing.T, pool *pgxpool.Pool) (idem.Store, idem.Store) {
		return func(t *testing.T, pool *pgxpool.Pool) (idem.Store, idem.Store) {
			table := newTable(t, pool, opts...)
			return mk(pool, table), mk(pool, table)
		}
	}
	lease := func(opts ...pgstore.Option) func(*pgxpool.Pool, string) idem.Store {
		return func(pool *pgxpool.Pool, table string) idem.Store {
			return pgstore.New(pool, append([]pgstore.Option{pgstore.WithTable(table)}, opts...)...)
		}
	}
	tx := func(opts ...pgstore.Option) func(*pgxpool.Pool, string) idem.Store {
		return func(pool *pgxpool.Pool, table string) idem.Store {
			return pgstore.NewTx(pool, append([]pgstore.Option{pgstore.WithTable(table)}, opts...)...)
		}
	}
	part := pgstore.WithPartitions(time.Minute)
	return []footprintStore{
		{"lease", two(lease())},
		{"lease-locktimeout", two(lease(pgstore.WithLockTimeout(50 * time.Millisecond)))},
		{"tx", two(tx())},
		{"partitioned-lease", two(lease(part), part)},
		{"partitioned-tx", two(tx(part), part)},
		{"tiered-tx", two(func(pool *pgxpool.Pool, table string) idem.Store {
			return tiered.NewTx(memstore.New(), pgstore.NewTx(pool, pgstore.WithTable(table)))
		})},
		{"tiered-partitioned-tx", two(func(pool *pgxpool.Pool, table string) idem.Store {
			return tiered.NewTx(memstore.New(), pgstore.NewTx(pool, pgstore.WithTable(table), part))
		}, part)},
		{"tiered-lease", two(func(pool *pgxpool.Pool, table string) idem.Store {
			return tiered.New(memstore.New(), pgstore.New(pool, pgstore.WithTable(table)))
		})},
	}
}

// TestNoServerErrors: a replay, a duplicate of a call in flight (rejected at
// once, or waiting and then replaying), and a payload mismatch (in flight
// and decided) make no statement fail on the server, in every mode of
// pgstore and on tiered over it; every answer is still the right one.
func TestNoServerErrors(t *testing.T) {
	for _, fs := range footprintStores() {
		t.Run(fs.name, func(t *testing.T) {
			pool, tr := tracedPool(t, 8)
			a, b := fs.newStores(t, pool)
			k := key(t, "", "footprint-"+randHex(4))
			first := claimReq(k, "payload", time.Minute, time.Hour)
			c, h := claimFor(t, a, first, 0)
			require.True(t, c.Claimed)

			// In flight: duplicates and a mismatch, from the same store
			// and from the other one, rejected at once or after a wait.
			for _, s := range []idem.Store{a, b} {
				for _, wait := range []time.Duration{0, 20 * time.Millisecond} {
					dup := claimReq(k, "payload", time.Minute, time.Hour)
					c, _ := claimFor(t, s, dup, wait)
					require.False(t, c.Claimed)
					assert.Equal(t, idem.StatusProcessing, c.Record.Status)
					assert.Equal(t, dup.Fingerprint, c.Record.Fingerprint, "the same payload is in progress")
					other := claimReq(k, "other", time.Minute, time.Hour)
					c, _ = claimFor(t, s, other, wait)
					require.False(t, c.Claimed)
					assert.Equal(t, idem.StatusProcessing, c.Record.Status)
					assert.NotEqual(t, other.Fingerprint, c.Record.Fingerprint, "another payload is a mismatch")
				}
			}
			// A duplicate that waits gets the outcome once it commits.
			waited := make(chan idem.Claim, 2)
			var wg sync.WaitGroup
			for _, s := range []idem.Store{a, b} {
				if _, isTx := s.(idem.TxStore); !isTx {
					continue
				}
				wg.Go(func() {
					c, _ := claimFor(t, s, claimReq(k, "payload", time.Minute, time.Hour), time.Minute)
					waited <- c
				})
			}
			h.complete(t, "done")
			wg.Wait()
			close(waited)
			for c := range waited {
				require.False(t, c.Claimed)
				assert.Equal(t, idem.StatusSucceeded, c.Record.Status)
				assert.Equal(t, "done", string(c.Record.Outcome.Body))
			}

			// Replays and a mismatch of the decided record.
			for range 5 {
				for _, s := range []idem.Store{a, b} {
					c, _ := claimFor(t, s, claimReq(k, "payload", time.Minute, time.Hour), 0)
					require.False(t, c.Claimed)
					assert.Equal(t, idem.StatusSucceeded, c.Record.Status)
					assert.Equal(t, fp("payload"), c.Record.Fingerprint)
					c, _ = claimFor(t, s, claimReq(k, "other", time.Minute, time.Hour), 0)
					require.False(t, c.Claimed)
					assert.Equal(t, fp("payload"), c.Record.Fingerprint, "a mismatch sees the record's payload")
				}
			}
			// Background commits of answered claims have returned their
			// connections once the pool is idle.
			require.Eventually(t, func() bool { return pool.Stat().AcquiredConns() == 0 }, 10*time.Second, time.Millisecond)
			assert.Empty(t, tr.failed(), "statements that failed on the server")
		})
	}
}
