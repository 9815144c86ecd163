package pgstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
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

// claimIn claims req in the store's mode: Claim in lease mode, ClaimTx (not
// waiting) in transactional mode, where end rolls back the transaction of
// a claim.
func claimIn(ctx context.Context, s idem.Store, req idem.ClaimRequest) (c idem.Claim, end func(), err error) {
	if ts, ok := s.(*pgstore.TxStore); ok {
		c, txn, err := ts.ClaimTx(ctx, req, 0)
		if txn == nil {
			return c, func() {}, err
		}
		return c, func() { _ = txn.Release(ctx) }, err
	}
	c, err = s.Claim(ctx, req)
	return c, func() {}, err
}

// TestClaimPaths: every answer of a claim, in both modes, whether the first
// statement answers it alone (a fresh key, a live record) or hands it to the
// full claim statement (an expired record, a lapsed lease, the caller's own
// claim repeated). The record before the claim is written by a lease-mode
// store (a transactional store never commits a PROCESSING record), and
// time passes on the store's clock by timeTravel.
func TestClaimPaths(t *testing.T) {
	pool := newPool(t, 8, nil)
	table := newTable(t, pool)
	lease := pgstore.New(pool, pgstore.WithTable(table))
	travel := timeTravel(t, pool, lease.Table())
	stores := map[string]idem.Store{"lease": lease, "tx": pgstore.NewTx(pool, pgstore.WithTable(table))}
	const ttl, leaseFor = time.Hour, time.Minute

	type setup func(t *testing.T, ctx context.Context, k idem.Key) idem.Token
	claimed := func(f string) setup { // a live claim of payload f; its token
		return func(t *testing.T, ctx context.Context, k idem.Key) idem.Token {
			r := idem.ClaimRequest{Key: k, Fingerprint: fp(f), Token: newToken(), Lease: leaseFor, TTL: ttl}
			c, err := lease.Claim(ctx, r)
			require.NoError(t, err)
			require.True(t, c.Claimed)
			return r.Token
		}
	}
	completed := func(st idem.Status) setup {
		return func(t *testing.T, ctx context.Context, k idem.Key) idem.Token {
			tok := claimed("p")(t, ctx, k)
			out := idem.Outcome{Status: st, Body: []byte("body"), ErrCode: "code", ErrMessage: "msg", Meta: []byte("meta")}
			require.NoError(t, lease.Complete(ctx, k, tok, out, ttl))
			return tok
		}
	}
	lapsed := func(f string, d time.Duration) setup {
		return func(t *testing.T, ctx context.Context, k idem.Key) idem.Token {
			tok := claimed(f)(t, ctx, k)
			travel(d)
			return tok
		}
	}
	cases := []struct {
		name  string
		setup setup
		// sameToken claims with the setup's token (a claim repeated after
		// its reply was lost).
		sameToken bool
		modes     string // "lease,tx" or one of them
		check     func(t *testing.T, c idem.Claim)
	}{
		{"fresh key", nil, false, "lease,tx", func(t *testing.T, c idem.Claim) {
			assert.True(t, c.Claimed)
			assert.False(t, c.TakenOver)
		}},
		{"succeeded", completed(idem.StatusSucceeded), false, "lease,tx", func(t *testing.T, c idem.Claim) {
			require.False(t, c.Claimed)
			assert.Equal(t, idem.StatusSucceeded, c.Record.Status)
			assert.Equal(t, fp("p"), c.Record.Fingerprint)
			assert.Equal(t, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("body"), ErrCode: "code", ErrMessage: "msg", Meta: []byte("meta")},
				c.Record.Outcome)
		}},
		{"failed final", completed(idem.StatusFailedFinal), false, "lease,tx", func(t *testing.T, c idem.Claim) {
			require.False(t, c.Claimed)
			assert.Equal(t, idem.StatusFailedFinal, c.Record.Status)
			assert.Equal(t, "code", c.Record.Outcome.ErrCode)
		}},
		{"live lease, same payload", claimed("p"), false, "lease,tx", func(t *testing.T, c idem.Claim) {
			require.False(t, c.Claimed)
			assert.Equal(t, idem.StatusProcessing, c.Record.Status)
			assert.Equal(t, fp("p"), c.Record.Fingerprint)
			assert.Greater(t, c.Record.LeaseLeft, leaseFor/2)
		}},
		{"live lease, other payload", claimed("other"), false, "lease,tx", func(t *testing.T, c idem.Claim) {
			require.False(t, c.Claimed)
			assert.Equal(t, fp("other"), c.Record.Fingerprint)
		}},
		{"own claim repeated", claimed("p"), true, "lease", func(t *testing.T, c idem.Claim) {
			assert.True(t, c.Claimed)
			assert.False(t, c.TakenOver)
		}},
		{"lapsed lease, same payload", lapsed("p", 2*leaseFor), false, "lease,tx", func(t *testing.T, c idem.Claim) {
			assert.True(t, c.Claimed)
			assert.True(t, c.TakenOver)
		}},
		{"lapsed lease, other payload", lapsed("other", 2*leaseFor), false, "lease,tx", func(t *testing.T, c idem.Claim) {
			require.False(t, c.Claimed)
			assert.Equal(t, fp("other"), c.Record.Fingerprint)
			assert.Zero(t, c.Record.LeaseLeft)
		}},
		{"expired record", func(t *testing.T, ctx context.Context, k idem.Key) idem.Token {
			tok := completed(idem.StatusSucceeded)(t, ctx, k)
			travel(2 * ttl)
			return tok
		}, false, "lease,tx", func(t *testing.T, c idem.Claim) {
			assert.True(t, c.Claimed)
			assert.False(t, c.TakenOver, "an expired record is replaced, not taken over")
		}},
	}
	for mode, store := range stores {
		for _, tc := range cases {
			if !strings.Contains(tc.modes, mode) {
				continue
			}
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				ctx := t.Context()
				k := key(t, "t", fmt.Sprintf("path-%s-%s", mode, randHex(6)))
				req := idem.ClaimRequest{Key: k, Fingerprint: fp("p"), Token: newToken(), Lease: leaseFor, TTL: ttl}
				if tc.setup != nil {
					tok := tc.setup(t, ctx, k)
					if tc.sameToken {
						req.Token = tok
					}
				}
				c, end, err := claimIn(ctx, store, req)
				require.NoError(t, err)
				defer end()
				tc.check(t, c)
			})
		}
	}
}

// TestTxClaimInOneTransaction: the statements of ClaimTx's batch that run
// before its BEGIN belong to the method's transaction, in every pgx query
// exec mode (the simple protocol included): while it is open,
// another session sees no record and cannot take the key's lock; a
// rollback leaves nothing. A replay ends with its one batch: the
// connection goes back to the pool outside a transaction (and is reused,
// not closed), with nothing locked.
func TestTxClaimInOneTransaction(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) { testTxClaimInOneTransaction(t, mode) })
	}
}

func testTxClaimInOneTransaction(t *testing.T, mode pgx.QueryExecMode) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.DefaultQueryExecMode = mode
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	other := newPool(t, 1, nil)
	table := newTable(t, pool)
	s := pgstore.NewTx(pool, pgstore.WithTable(table))
	ctx := t.Context()
	k := key(t, "t", "one-tx-"+randHex(6))
	lockKey := int64(binary.BigEndian.Uint64(k.ID[:8]))
	visible := func() (rows int, lockFree bool) {
		require.NoError(t, other.QueryRow(ctx, "SELECT count(*) FROM "+s.Table()+" WHERE key = $1", k.ID[:]).Scan(&rows))
		tx, err := other.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1::bigint)", lockKey).Scan(&lockFree))
		return rows, lockFree
	}

	req := idem.ClaimRequest{Key: k, Fingerprint: fp("p"), Token: newToken(), Lease: time.Minute, TTL: time.Hour}
	c, txn, err := s.ClaimTx(ctx, req, 0)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	rows, free := visible()
	assert.Zero(t, rows, "the claim is not committed while the method runs")
	assert.False(t, free, "the key's lock is held by the open transaction")
	require.NoError(t, txn.Release(ctx))
	rows, free = visible()
	assert.Zero(t, rows, "a released claim leaves nothing")
	assert.True(t, free)

	req.Token = newToken()
	c, txn, err = s.ClaimTx(ctx, req, 0)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	require.NoError(t, txn.Complete(ctx, succeeded("42"), time.Hour, false))
	conns := pool.Stat().NewConnsCount()
	for range 3 {
		req.Token = newToken()
		c, txn, err = s.ClaimTx(ctx, req, 0)
		require.NoError(t, err, "the guard's failure is not the caller's")
		require.Nil(t, txn)
		require.False(t, c.Claimed)
		assert.Equal(t, []byte("42"), c.Record.Outcome.Body)
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus(), "the replay's transaction ended with its batch")
		conn.Release()
		rows, free = visible()
		assert.Equal(t, 1, rows)
		assert.True(t, free, "a replay holds no lock")
	}
	assert.Equal(t, conns, pool.Stat().NewConnsCount(), "the replay's connection is reused, not closed")
}

// TestErrorConvention: every error a store operation returns names the
// store, the operation and the key's hex ID, and wraps its cause (issue 15):
// "pgstore: OP KEYHEX: cause".
func TestErrorConvention(t *testing.T) {
	pool := newPool(t, 4, nil)
	for mode, store := range modes(t, pool) {
		t.Run(mode, func(t *testing.T) {
			ctx := t.Context()
			k := key(t, "t", "conv-"+mode+"-"+randHex(4))
			check := func(err error, op string, target error) {
				t.Helper()
				require.ErrorIs(t, err, target)
				assert.True(t, strings.HasPrefix(err.Error(), "pgstore: "+op+" "+k.Hex()+": "), "%q", err.Error())
			}
			r := idem.ClaimRequest{Key: k, Fingerprint: fp("p"), Token: newToken(), Lease: time.Minute, TTL: time.Hour}
			c, err := store.Claim(ctx, r)
			require.NoError(t, err)
			require.True(t, c.Claimed)
			stranger := newToken()
			check(store.Complete(ctx, k, stranger, succeeded("x"), time.Hour), "complete", idem.ErrLeaseLost)
			check(store.Release(ctx, k, stranger), "release", idem.ErrLeaseLost)
			check(store.(idem.Renewer).Renew(ctx, k, stranger, time.Minute), "renew", idem.ErrLeaseLost)
			big := idem.Outcome{Status: idem.StatusSucceeded, Body: make([]byte, idem.MaxOutcomeLen+1)}
			check(store.Complete(ctx, k, r.Token, big, time.Hour), "complete", idem.ErrTooLarge)
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, err = store.Claim(cctx, idem.ClaimRequest{Key: k, Fingerprint: fp("p"), Token: newToken(), Lease: time.Minute, TTL: time.Hour})
			check(err, "claim", context.Canceled)
		})
	}
	t.Run("tx/txn", func(t *testing.T) {
		ctx := t.Context()
		s := pgstore.NewTx(pool, pgstore.WithTable(newTable(t, pool)))
		k := key(t, "t", "conv-txn-"+randHex(4))
		_, txn, err := s.ClaimTx(ctx, idem.ClaimRequest{Key: k, Fingerprint: fp("p"), Token: newToken(), Lease: time.Minute, TTL: time.Hour}, 0)
		require.NoError(t, err)
		require.NoError(t, txn.Complete(ctx, succeeded("x"), time.Hour, false))
		for op, err := range map[string]error{"complete": txn.Complete(ctx, succeeded("x"), time.Hour, false), "release": txn.Release(ctx)} {
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "pgstore: "+op+" "+k.Hex()+": "), "%q", err.Error())
			assert.False(t, errors.Is(err, idem.ErrLeaseLost))
		}
	})
}
