package pgstore_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/lossyproxy"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// modes returns a store of each mode on one table of pool.
func modes(t *testing.T, pool *pgxpool.Pool) map[string]idem.Store {
	table := newTable(t, pool)
	return map[string]idem.Store{
		"lease": pgstore.New(pool, pgstore.WithTable(table)),
		"tx":    pgstore.NewTx(pool, pgstore.WithTable(table)),
	}
}

// call runs one idempotent call of op with key part id under tenant,
// payload amount, through ex; fn is the method.
func call(ctx context.Context, ex *idem.Executor, m *idem.Method, id string, amount int64, fn func(context.Context) (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.Int(amount)
	return idem.Do(ctx, ex, m, &k, &h, fn)
}

var errHostile = errors.New("hostile")

// TestBytesThroughDo: tenants, operations, keys, final error codes and
// messages are bytes. NUL bytes, invalid UTF-8 and the longest operation
// name are stored and replayed exactly, in both modes, and the method runs
// once: a storage encoding error can no longer turn a decided outcome into
// a second run (v0.1 refused them as text).
func TestBytesThroughDo(t *testing.T) {
	pool := newPool(t, 8, nil)
	hostile := map[string]string{
		"nul":          "a\x00b",
		"invalid-utf8": "\xff\xfe\x80",
		"both":         "\x00\xc3\x28",
		"long":         strings.Repeat("/%FF", idem.MaxOpLen/4),
	}
	for mode, store := range modes(t, pool) {
		for name, b := range hostile {
			t.Run(mode+"/"+name, func(t *testing.T) {
				ctx := t.Context()
				tenant := b + randHex(4)
				if len(tenant) > idem.MaxTenantLen {
					tenant = tenant[len(tenant)-idem.MaxTenantLen:]
				}
				ex := idem.NewExecutor(store, idem.WithTenant(func(context.Context) string { return tenant }))
				op := b
				if len(op) > idem.MaxOpLen {
					op = op[:idem.MaxOpLen]
				}
				m := &idem.Method{Op: op, TTL: time.Hour, Lease: time.Minute,
					Final: []idem.FinalError{{Name: "code" + b, Err: errHostile}}}
				var runs atomic.Int32
				msg := "declined: " + b
				fail := func(context.Context) (string, error) {
					runs.Add(1)
					return "", fmt.Errorf("%s: %w", msg, errHostile)
				}
				for i := range 3 {
					_, err := call(ctx, ex, m, "k"+b, 1, fail)
					require.ErrorIs(t, err, errHostile, "call %d", i)
					assert.Equal(t, msg+": hostile", err.Error(), "call %d: the message, byte for byte", i)
					if i > 0 {
						var re *idem.ReplayedError
						require.ErrorAs(t, err, &re)
						assert.Equal(t, "code"+b, re.Code)
					}
				}
				assert.Equal(t, int32(1), runs.Load(), "the final error was stored and replayed")
				// (The JSON codec turns invalid UTF-8 in a string result into
				// U+FFFD: that is the codec's, so the result is hex.)
				ok := func(context.Context) (string, error) { runs.Add(1); return "ok" + hex.EncodeToString([]byte(b)), nil }
				for range 2 {
					v, err := call(ctx, ex, m, "other"+b, 1, ok)
					require.NoError(t, err)
					assert.Equal(t, "ok"+hex.EncodeToString([]byte(b)), v)
				}
				assert.Equal(t, int32(2), runs.Load())
			})
		}
	}
}

// TestTooLarge: a tenant or operation over the limits, or an outcome over
// idem.MaxOutcomeLen, is refused with idem.ErrTooLarge before anything is
// written.
func TestTooLarge(t *testing.T) {
	pool := newPool(t, 4, nil)
	for mode, store := range modes(t, pool) {
		t.Run(mode, func(t *testing.T) {
			ctx := t.Context()
			big := strings.Repeat("x", idem.MaxOpLen+1)
			k := idem.Key{Tenant: "t", Op: big, ID: key(t, "t", "big-op").ID}
			_, err := store.Claim(ctx, idem.ClaimRequest{Key: k, Token: newToken(), Lease: time.Second, TTL: time.Minute})
			require.ErrorIs(t, err, idem.ErrTooLarge)
			assert.Contains(t, err.Error(), k.Hex())
			k = idem.Key{Tenant: strings.Repeat("t", idem.MaxTenantLen+1), Op: "op", ID: key(t, "t", "big-tenant").ID}
			_, err = store.Claim(ctx, idem.ClaimRequest{Key: k, Token: newToken(), Lease: time.Second, TTL: time.Minute})
			require.ErrorIs(t, err, idem.ErrTooLarge)
			r := claimReq(key(t, "t", "big-outcome-"+mode), "p", time.Minute, time.Minute)
			c, err := store.Claim(ctx, r)
			require.NoError(t, err)
			require.True(t, c.Claimed)
			out := idem.Outcome{Status: idem.StatusSucceeded, Body: make([]byte, idem.MaxOutcomeLen), Meta: []byte{1}}
			require.ErrorIs(t, store.Complete(ctx, r.Key, r.Token, out, time.Minute), idem.ErrTooLarge)
			var n int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+store.(interface{ Table() string }).Table()+
				" WHERE octet_length(op) > $1 OR octet_length(tenant) > $2", idem.MaxOpLen, idem.MaxTenantLen).Scan(&n))
			assert.Zero(t, n, "nothing too large was written")
		})
	}
}

// TestMigrateLongTableNames: every name Migrate derives fits 63 bytes, so a
// 63-byte table name gets its sweep index (v0.1's truncated index name was
// the table's own, and CREATE INDEX IF NOT EXISTS created nothing), and two
// long names that share their first 50 bytes get an index each.
func TestMigrateLongTableNames(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t, 2, nil)
	prefix := "idem_long_" + randHex(20) // 50 bytes
	for _, name := range []string{prefix + strings.Repeat("a", 13), prefix + strings.Repeat("b", 13), prefix + "_c"} {
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
		})
		s := pgstore.New(pool, pgstore.WithTable(name))
		require.NoError(t, s.Migrate(ctx))
		require.NoError(t, s.Migrate(ctx), "again")
		var idx []string
		rows, err := pool.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE tablename = $1 ORDER BY indexname`, name)
		require.NoError(t, err)
		idx, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Len(t, idx, 3, "%s: the primary key, the sweep index and the listing's index", name)
		assert.Contains(t, strings.Join(idx, " "), "(sweep_at)")
		assert.Contains(t, strings.Join(idx, " "), "(op, created_at, key)")
	}
}

// v01Table creates a table and an archive of v0.1's layout (the schema it
// shipped, kept in testdata) and one SUCCEEDED record, as v0.1 wrote it.
func v01Table(t *testing.T, pool *pgxpool.Pool, table, archive string, k idem.Key, f idem.Fingerprint) {
	ctx := t.Context()
	schema, err := os.ReadFile("testdata/schema_v01.sql")
	require.NoError(t, err)
	arch, err := os.ReadFile("testdata/archive_v01.sql")
	require.NoError(t, err)
	r := strings.NewReplacer("idem_records_expires_at_idx", table+"_expires_at_idx", "idem_records_archive", archive, "idem_records", table)
	_, err = pool.Exec(ctx, r.Replace(string(schema))+"\n"+r.Replace(string(arch)))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()+", "+pgx.Identifier{archive}.Sanitize())
	})
	_, err = pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{table}.Sanitize()+` (tenant, op, key, key_text, fingerprint, status,
		token, lease_until, body, err_code, err_message, meta, expires_at)
		VALUES ($1, $2, $3, $4, $5, 2, 77, now(), '"receipt"', '', '', '\x01', now() + interval '1 hour')`,
		k.Tenant, k.Op, k.ID[:], k.Text, f[:])
	require.NoError(t, err)
}

// TestMigrateUpgradesV01: Migrate converts a table (and archive) of v0.1's
// layout in place: its live records keep deduplicating (a retry that
// straddles the upgrade replays), and the converted table takes any bytes,
// sweeps and archives.
func TestMigrateUpgradesV01(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t, 4, nil)
	table, archive := "idem_v01_"+randHex(4), "idem_v01_arch_"+randHex(4)
	k := key(t, "acme", "order-1")
	v01Table(t, pool, table, archive, k, fp("p"))

	s := pgstore.New(pool, pgstore.WithTable(table), pgstore.WithArchive(archive))
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Migrate(ctx), "again: nothing left to upgrade")

	c, err := s.Claim(ctx, claimReq(k, "p", time.Minute, time.Hour))
	require.NoError(t, err)
	require.False(t, c.Claimed, "the v0.1 record still holds the key")
	assert.Equal(t, idem.StatusSucceeded, c.Record.Status)
	assert.Equal(t, []byte(`"receipt"`), c.Record.Outcome.Body)
	assert.Equal(t, []byte{1}, c.Record.Outcome.Meta)
	assert.Equal(t, idem.Token(77), c.Record.Token)

	nul := key(t, "a\x00\xff", "b\x00")
	r := claimReq(nul, "p", time.Minute, time.Hour)
	c, err = s.Claim(ctx, r)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	require.NoError(t, s.Complete(ctx, nul, r.Token, idem.Outcome{Status: idem.StatusFailedFinal, ErrMessage: "\x00\xff"}, time.Hour))

	expire(t, pool, s.Table(), [][]byte{k.ID[:]})
	n, err := s.Sweep(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	var archived int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{archive}.Sanitize()+" WHERE key = $1", k.ID[:]).Scan(&archived))
	assert.Equal(t, 1, archived)
}

// proxied returns a pool whose connections go through a lossy proxy in
// front of the test server.
func proxied(t *testing.T, maxConns int32) (*pgxpool.Pool, *lossyproxy.Proxy) {
	p := lossyproxy.New(t, testenv.PostgresAddr(t))
	return testenv.PGPoolVia(t, p.Addr(), maxConns), p
}

// TestClaimReplyLost: a lease-mode claim reaches the server and commits,
// but its caller never gets the reply: its context expired right after the
// request was sent, or the connection broke. The caller was told the claim
// failed, so the claim it may have made must not block the key for the
// lease (v0.1 left it PROCESSING: the caller's retry got ErrInProgress).
func TestClaimReplyLost(t *testing.T) {
	for _, cancelled := range []bool{true, false} {
		t.Run(map[bool]string{true: "context-expired", false: "connection-lost"}[cancelled], func(t *testing.T) {
			pool, proxy := proxied(t, 4)
			table := newTable(t, pool)
			s := pgstore.New(pool, pgstore.WithTable(table))
			k := key(t, "lost", randHex(4))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			proxy.DropNextReplyTo(func(req []byte) bool {
				if !bytes.Contains(req, k.ID[:]) {
					return false
				}
				if cancelled {
					cancel() // the caller gives up once the request is on its way
				}
				return true
			})
			r := claimReq(k, "p", time.Hour, time.Hour)
			_, err := s.Claim(ctx, r)
			require.Error(t, err, "the caller never got the reply")
			require.Eventually(t, func() bool { return proxy.Dropped() == 1 }, 30*time.Second, 10*time.Millisecond,
				"the claim reached the server, which answered")
			assert.Contains(t, err.Error(), k.Hex())

			retry := claimReq(k, "p", time.Hour, time.Hour)
			c, err := s.Claim(t.Context(), retry)
			require.NoError(t, err)
			assert.True(t, c.Claimed, "the caller's retry claims the key: the lost claim was released")
		})
	}
}

// TestLostRepliesThroughDo: the reply to a claim or to the outcome is lost
// on its way back (the proxy forwards the request, the server applies it,
// the connection breaks). The method runs once; the caller that succeeded
// is told so (the executor repeats Complete with its token; in
// transactional mode the store asks whether its COMMIT committed), or, when
// the claim's reply was lost, is told to retry and its retry runs.
func TestLostRepliesThroughDo(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		for _, lost := range []string{"claim", "outcome"} {
			t.Run(mode+"/"+lost, func(t *testing.T) {
				pool, proxy := proxied(t, 4)
				table := newTable(t, pool)
				var store idem.Store = pgstore.New(pool, pgstore.WithTable(table))
				if mode == "tx" {
					store = pgstore.NewTx(pool, pgstore.WithTable(table))
				}
				ex := idem.NewExecutor(store, idem.SingleTenant())
				m := &idem.Method{Op: "lost.Op", TTL: time.Hour, Lease: time.Hour}
				id := "lost-" + randHex(4)
				k, err := idem.NewKey("", m.Op, id)
				require.NoError(t, err)
				receipt := "receipt-" + randHex(8)
				marker := k.ID[:]
				if lost == "outcome" {
					marker = []byte(receipt)
				}
				proxy.DropNextReplyTo(func(req []byte) bool { return bytes.Contains(req, marker) })
				var runs atomic.Int32
				fn := func(context.Context) (string, error) { runs.Add(1); return receipt, nil }
				v, err := call(t.Context(), ex, m, id, 5, fn)
				require.Equal(t, 1, proxy.Dropped())
				if lost == "outcome" {
					require.NoError(t, err, "the call succeeded and its outcome was stored: the caller is told so")
					assert.Equal(t, receipt, v)
				} else if err != nil {
					t.Logf("claim's reply lost: %v", err)
				}
				v, err = call(t.Context(), ex, m, id, 5, fn)
				require.NoError(t, err, "the retry is not blocked by the lost claim")
				assert.Equal(t, receipt, v)
				assert.Equal(t, int32(1), runs.Load(), "the method ran once")
			})
		}
	}
}

// TestPoolPressure: in transactional mode every running call holds a
// connection. With the pool (2 connections) held by two running calls, a
// duplicate of one of them is answered ErrInProgress without a connection
// (at once, or after its wait), and a call of a new key answers within its
// wait with ErrStoreBusy (which matches ErrStoreFull too), instead of
// hanging until its context ends (v0.1); once the calls end, the duplicate
// replays and the new key runs.
func TestPoolPressure(t *testing.T) {
	pool := newPool(t, 2, nil)
	table := newTable(t, pool)
	s := pgstore.NewTx(pool, pgstore.WithTable(table), pgstore.WithAcquireTimeout(200*time.Millisecond))
	ex := idem.NewExecutor(s, idem.SingleTenant())
	m := &idem.Method{Op: "pressure.Op", TTL: time.Hour, Lease: time.Minute}
	inside, finish := make(chan struct{}, 2), make(chan struct{})
	var finished sync.Once
	release := func() { finished.Do(func() { close(finish) }) }
	defer release() // on a failure too, so that the pool can close
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b"} {
		wg.Go(func() {
			_, err := call(context.Background(), ex, m, id, 1, func(context.Context) (string, error) {
				inside <- struct{}{}
				<-finish
				return "done-" + id, nil
			})
			assert.NoError(t, err)
		})
	}
	<-inside
	<-inside

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for _, wait := range []time.Duration{0, 100 * time.Millisecond} {
		mw := *m
		mw.Wait = wait
		_, err := call(ctx, ex, &mw, "a", 1, func(context.Context) (string, error) { return "dup", nil })
		require.ErrorIs(t, err, idem.ErrInProgress, "a duplicate, wait %v", wait)
		require.NotErrorIs(t, err, idem.ErrStoreFull)
		start := time.Now()
		_, err = call(ctx, ex, &mw, "c", 1, func(context.Context) (string, error) { return "c", nil })
		took := time.Since(start)
		require.ErrorIs(t, err, idem.ErrStoreBusy, "a new key, wait %v", wait)
		require.ErrorIs(t, err, idem.ErrStoreFull, "ErrStoreBusy matches ErrStoreFull")
		assert.NoError(t, ctx.Err(), "answered before the caller's deadline")
		assert.GreaterOrEqual(t, took, max(wait, 200*time.Millisecond)-10*time.Millisecond, "it waited for a connection")
		t.Logf("wait %v: %v after %v", wait, err, took)
	}
	release()
	wg.Wait()
	v, err := call(ctx, ex, m, "a", 1, func(context.Context) (string, error) { return "dup", nil })
	require.NoError(t, err)
	assert.Equal(t, "done-a", v)
	v, err = call(ctx, ex, m, "c", 1, func(context.Context) (string, error) { return "c", nil })
	require.NoError(t, err)
	assert.Equal(t, "c", v)
}

// TestHotKeyPool: hundreds of concurrent duplicates of one slow call, on
// a pool of 3 connections, never take a connection: each is answered
// ErrInProgress at once (never ErrStoreFull or ErrStoreBusy), or, when it
// waits, gets the call's outcome once it commits; other keys are served
// meanwhile on the rest of the pool. Whatever the machine's load: nothing
// here races the clock (the slow call ends only when the duplicates have
// been answered).
func TestHotKeyPool(t *testing.T) {
	for _, part := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "partitioned"}[part], func(t *testing.T) {
			pool := newPool(t, 3, nil)
			var opts []pgstore.Option
			if part {
				opts = append(opts, pgstore.WithPartitions(time.Minute))
			}
			table := newTable(t, pool, opts...)
			s := pgstore.NewTx(pool, append(opts, pgstore.WithTable(table))...)
			ex := idem.NewExecutor(s, idem.SingleTenant())
			m := &idem.Method{Op: "hot.Op", TTL: time.Hour, Lease: time.Minute}
			inside, finish := make(chan struct{}), make(chan struct{})
			var finished sync.Once
			release := func() { finished.Do(func() { close(finish) }) }
			defer release()
			var runs atomic.Int32
			slow := func(context.Context) (string, error) {
				runs.Add(1)
				close(inside)
				<-finish
				return "hot", nil
			}
			var wg sync.WaitGroup
			wg.Go(func() {
				v, err := call(context.Background(), ex, m, "hot", 1, slow)
				assert.NoError(t, err)
				assert.Equal(t, "hot", v)
			})
			<-inside

			const dups = 300
			errs := make(chan error, dups)
			var dupWG sync.WaitGroup
			for range dups {
				dupWG.Go(func() {
					_, err := call(t.Context(), ex, m, "hot", 1, slow)
					errs <- err
				})
			}
			// Other keys, served while the duplicates run, by as many
			// callers as the pool has connections left.
			var others sync.WaitGroup
			for w := range 2 {
				others.Go(func() {
					for i := range 10 {
						id := fmt.Sprintf("other-%d-%d", w, i)
						v, err := call(t.Context(), ex, m, id, 1, func(context.Context) (string, error) { return id, nil })
						assert.NoError(t, err, "another key")
						assert.Equal(t, id, v)
					}
				})
			}
			dupWG.Wait()
			others.Wait()
			close(errs)
			for err := range errs {
				require.ErrorIs(t, err, idem.ErrInProgress)
				require.NotErrorIs(t, err, idem.ErrStoreFull)
			}
			// Duplicates that wait get the outcome once it commits.
			mw := *m
			mw.Wait = time.Minute
			waited := make(chan string, dups)
			var waitWG sync.WaitGroup
			for range dups {
				waitWG.Go(func() {
					v, err := call(t.Context(), ex, &mw, "hot", 1, slow)
					assert.NoError(t, err)
					waited <- v
				})
			}
			release()
			waitWG.Wait()
			wg.Wait()
			close(waited)
			for v := range waited {
				require.Equal(t, "hot", v)
			}
			assert.Equal(t, int32(1), runs.Load(), "the method ran once")
		})
	}
}

// TestTxMismatchWhileRunning: in transactional mode the first call's claim
// is uncommitted, so a duplicate cannot see its payload; the payload lock
// tells it: another payload gets ErrPayloadMismatch (as on every other
// store; v0.1 said ErrInProgress), the same payload ErrInProgress, whether
// the duplicate waits or not, and with other duplicates waiting on the key.
func TestTxMismatchWhileRunning(t *testing.T) {
	e := newTxEnv(t, 8)
	req := CreditRequest{ID: "mismatch-" + randHex(4), Amount: 3}
	inside, finish := make(chan struct{}), make(chan struct{})
	var finished sync.Once
	release := func() { finished.Do(func() { close(finish) }) }
	defer release()
	e.ledger.hook = func(context.Context, pgx.Tx) error { close(inside); <-finish; return nil }
	done := make(chan error, 1)
	go func() { _, err := e.svc.Credit(context.Background(), req); done <- err }()
	<-inside
	e.ledger.hook = nil

	// A duplicate with the first payload waits on the key meanwhile.
	waiting := make(chan error, 1)
	long := idemLedgerCredit
	long.Wait = time.Minute
	go func() { _, err := e.svc.credit(context.Background(), &long, req); waiting <- err }()

	other := req
	other.Amount = 4
	for _, wait := range []time.Duration{0, 200 * time.Millisecond} {
		m := idemLedgerCredit
		m.Wait = wait
		_, err := e.svc.credit(t.Context(), &m, other)
		require.ErrorIs(t, err, idem.ErrPayloadMismatch, "wait %v: another payload", wait)
		_, err = e.svc.credit(t.Context(), &m, req)
		require.ErrorIs(t, err, idem.ErrInProgress, "wait %v: the same payload", wait)
	}
	release()
	require.NoError(t, <-done)
	require.NoError(t, <-waiting, "the waiting duplicate replays")
	_, err := e.svc.Credit(t.Context(), other)
	require.ErrorIs(t, err, idem.ErrPayloadMismatch, "and once committed")
	assert.Len(t, e.ledger.rows(t)[req.ID], 1)
}

// TestTxMismatchManyKeys: the payload lock tells a mismatch for any key
// and payload, whatever the lock's halves are (as oids, the halves of
// three keys in four are >= 2^31, which an int4 cast once refused, so those
// duplicates were told "in progress").
func TestTxMismatchManyKeys(t *testing.T) {
	e := newTxEnv(t, 4)
	m := idemLedgerCredit
	m.Wait = 0
	for i := range 12 {
		req := CreditRequest{ID: fmt.Sprintf("many-%d-%s", i, randHex(4)), Amount: 3}
		inside, finish := make(chan struct{}), make(chan struct{})
		var finished sync.Once
		release := func() { finished.Do(func() { close(finish) }) }
		e.ledger.hook = func(context.Context, pgx.Tx) error { close(inside); <-finish; return nil }
		done := make(chan error, 1)
		go func() { _, err := e.svc.Credit(context.Background(), req); done <- err }()
		<-inside
		e.ledger.hook = nil
		other := req
		other.Amount = int64(4 + i)
		_, err := e.svc.credit(t.Context(), &m, other)
		assert.ErrorIs(t, err, idem.ErrPayloadMismatch, "key %d: another payload", i)
		_, err = e.svc.credit(t.Context(), &m, req)
		assert.ErrorIs(t, err, idem.ErrInProgress, "key %d: the same payload", i)
		release()
		require.NoError(t, <-done)
	}
}

// TestTxRenew: in transactional mode the open transaction holds the key,
// so renewing its claim is a no-op that succeeds while it is open; once it
// committed, the record is final and Renew answers ErrLeaseLost.
func TestTxRenew(t *testing.T) {
	pool := newPool(t, 4, nil)
	s := pgstore.NewTx(pool, pgstore.WithTable(newTable(t, pool)))
	ctx := t.Context()
	r := claimReq(key(t, "renew", randHex(4)), "p", time.Minute, time.Hour)
	c, txn, err := s.ClaimTx(ctx, r, 0)
	require.NoError(t, err)
	require.True(t, c.Claimed)
	require.NoError(t, s.Renew(ctx, r.Key, r.Token, time.Minute))
	require.ErrorIs(t, s.Renew(ctx, r.Key, newToken(), time.Minute), idem.ErrLeaseLost, "another token")
	require.NoError(t, txn.Complete(ctx, succeeded("x"), time.Hour, false))
	require.ErrorIs(t, s.Renew(ctx, r.Key, r.Token, time.Minute), idem.ErrLeaseLost, "final")
}
