package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TxStore is a PostgreSQL idempotency store in transactional mode; it
// implements idem.TxStore, so an idem.Executor on it runs the claim, the
// method and the outcome in one transaction. Its Store methods (Claim,
// Complete, Release, Renew, Migrate, Sweep) are those of lease mode, for
// callers that use the idem.Store contract directly, except that Renew of a
// claim held by one of this store's open transactions answers nil: the open
// transaction holds the key until it ends, so there is no lease to extend.
// It is safe for concurrent use.
type TxStore struct {
	*Store
	open    sync.Map // idem.Token -> [32]byte key ID, of claims held in open transactions
	flights flights  // keys that ClaimTx calls claim or hold (see the package documentation, Transactional claims)
	parking parking  // connections whose transaction awaits a COMMIT (see parking)
	hooks   flightHooks
	prepare bool // the pool's connections cache statements (see batchQueries)
}

// flightHooks let a test order a duplicate's call after a leader's answer
// (see SetFlightHooks in export_test.go); nil outside tests.
type flightHooks struct {
	answered func() // in a leader, once its claim batch answered
	joined   func() // in a duplicate, once it joined a flight
}

// NewTx returns a store in transactional mode on pool; the options are those
// of New. The table must exist (see Store.Migrate). NewTx panics if an
// option names an invalid table.
//
// It is a separate constructor, not an option of New, because the executor
// chooses transactional mode by the store's type (idem.TxStore).
func NewTx(pool *pgxpool.Pool, opts ...Option) *TxStore {
	cfg := pool.Config() // a copy
	s := &TxStore{Store: New(pool, opts...),
		prepare: cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement}
	s.parking.max, s.parking.idle = max(1, int(cfg.MaxConns)/4), parkIdle
	return s
}

// savepoint is set after the claim: a final error rolls the method's writes
// back to it and keeps the claim.
const (
	beginSQL      = "BEGIN"
	savepointSQL  = "SAVEPOINT idem_method"
	rollbackToSQL = "ROLLBACK TO SAVEPOINT idem_method"
	commitSQL     = "COMMIT"
	rollbackSQL   = "ROLLBACK"
)

// keyLock is the transaction-scoped advisory lock that a claim holds on its
// key until it commits or rolls back: the first 8 bytes of the key's SHA-256
// (which covers tenant and operation). Keys of different stores of one
// database may share a lock (a duplicate then waits a little longer); an
// application's own advisory locks could collide only with probability
// 2^-64 per pair.
func keyLock(k idem.Key) int64 { return int64(binary.BigEndian.Uint64(k.ID[:8])) }

// payloadLock is the pair of int4 keys of the shared advisory lock that a
// claimer holds beside the key's lock: bytes 8 to 11 of the key ID (which
// payload locks of one key share), and the first 4 bytes of SHA-256(key ID,
// fingerprint). It names the payload of the transaction that holds the key,
// so that a duplicate that cannot wait longer tells "the same request is
// running" from "another payload holds this key" without seeing the
// uncommitted claim. (A two-int4 advisory lock never equals a bigint one:
// pg_locks tells them apart by objsubid.)
func payloadLock(k idem.Key, fp idem.Fingerprint) (int32, int32) {
	h := sha256.New()
	h.Write(k.ID[:])
	h.Write(fp[:])
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return int32(binary.BigEndian.Uint32(k.ID[8:12])), int32(binary.BigEndian.Uint32(sum[:4]))
}

// ClaimTx implements idem.TxStore: it claims the key in a transaction that
// the returned Txn owns, with its connection, until Commit or Rollback. When
// every connection of the pool is in use it waits at most wait or, when that
// is shorter, the acquire timeout (WithAcquireTimeout), then returns an
// error matching idem.ErrStoreBusy and idem.ErrStoreFull, having claimed
// nothing. Duplicates of a held key take no connection; see the package
// documentation, section Transactional claims.
func (s *TxStore) ClaimTx(ctx context.Context, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, error) {
	if err := idem.CheckClaim(req); err != nil {
		return idem.Claim{}, nil, fail("claim", req.Key, err)
	}
	if s.part != nil {
		if err := s.partitionsFor(ctx, req.TTL); err != nil {
			return idem.Claim{}, nil, fail("claim", req.Key, err)
		}
	}
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	pause := time.Millisecond
	for {
		f, leader, late := s.flights.join(req)
		if !leader {
			if s.hooks.joined != nil {
				s.hooks.joined()
			}
			c, again, err := f.follow(ctx, req, deadline, late)
			if err != nil {
				return idem.Claim{}, nil, fail("claim", req.Key, err)
			}
			if !again {
				return c, nil, nil
			}
			continue
		}
		left := time.Duration(0)
		if wait > 0 {
			left = max(time.Until(deadline), time.Millisecond)
		}
		var (
			c    idem.Claim
			t    *txn
			busy bool
			err  error
		)
		if s.part != nil {
			c, t, busy, err = s.claimTxPartitioned(ctx, req, left, f)
		} else {
			c, t, busy, err = s.claimTxPlain(ctx, req, left, f)
		}
		if s.hooks.answered != nil {
			s.hooks.answered()
		}
		if t != nil {
			t.flight = f
			s.flights.hold(f)
			return c, t, nil
		}
		s.flights.leave(f, c, busy, err == nil)
		if err != nil {
			return idem.Claim{}, nil, err
		}
		if !busy || wait <= 0 || !time.Now().Before(deadline) {
			return c, nil, nil
		}
		// Held by a transaction this store does not know (another
		// process): wait off the connection, then look again.
		if err := sleepCtx(ctx, min(pause, time.Until(deadline))); err != nil {
			return idem.Claim{}, nil, fail("claim", req.Key, err)
		}
		pause = min(2*pause, maxPollPause)
	}
}

// maxPollPause is the longest pause between two looks of a duplicate that
// waits for a key held in another process.
const maxPollPause = 50 * time.Millisecond

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// claimTxPlain is one claim of ClaimTx on the plain table: one batch (see
// the package documentation, Transactional claims), and, in the rare cases the insert leaves to the full claim
// statement (the key has a row: an expired record or a lapsed lease to take
// over; or a row committed by a lease-mode writer after probe's snapshot),
// a second batch in the same transaction, under the key's lock already
// held. busy reports a key held by a transaction this
// store does not know.
func (s *TxStore) claimTxPlain(ctx context.Context, req idem.ClaimRequest, wait time.Duration, f *flight) (idem.Claim, *txn, bool, error) {
	conn, pending, err := s.acquireConn(ctx, wait)
	if err != nil {
		return idem.Claim{}, nil, false, fail("claim", req.Key, err)
	}
	s.flights.send(f)
	if s.finals.has(req.Key) {
		c, ok, err := s.replayHintedTx(ctx, conn, pending, req)
		if err != nil {
			return s.claimed(ctx, conn, nil, req, decision{}, idem.Claim{}, err)
		}
		if ok {
			conn.Release()
			return c, nil, false, nil
		}
		pending = false // committed by replayHintedTx
	}
	args := s.claimArgs(req)
	pa, pb := payloadLock(req.Key, req.Fingerprint)
	q, err := s.batchQueries(ctx, conn.Conn(), pending)
	if err != nil {
		end(ctx, conn)
		return idem.Claim{}, nil, false, fail("claim", req.Key, err)
	}
	var claim idem.Claim
	// The batch's statements run in one transaction, implicit until BEGIN
	// makes it explicit (PostgreSQL runs what a pipeline sends before its
	// Sync as one transaction, and a BEGIN inside it keeps what ran
	// before): the key lock and the claim are part of the method's
	// transaction. pgx's Tx for it comes from Batch.BeginTx, whose begin
	// query is here decide, or, on a parked connection, the COMMIT of its
	// transaction.
	cb := &claimBatch{req: req}
	b := &cb.b
	b.QueuedQueries = cb.ptrs[:0]
	var dq *pgx.QueuedQuery
	if pending {
		b.BeginTx(pgx.TxOptions{BeginQuery: commitSQL})
		dq = cb.queue(q.decide, s.probeArgs(req, pa, pb))
	} else {
		b.BeginTx(pgx.TxOptions{BeginQuery: q.decide})
		dq = b.QueuedQueries[0]
		dq.Arguments = s.probeArgs(req, pa, pb)
	}
	dq.Fn = cb.probe
	cb.queue(q.fast, args).Fn = cb.insert
	cb.queue(q.begin, nil)
	cb.queue(q.savepoint, nil)
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	err = br.Close()
	d := cb.d
	if err == nil && d.kind == decideBusy {
		err = busyPayload(ctx, conn, req, &d)
	}
	if err == nil && d.kind == decideLocked {
		switch {
		case cb.inserted:
			claim = idem.Claim{Claimed: true}
		case cb.fresh:
			// A row committed after probe's snapshot (a lease-mode
			// writer's): the full claim statement sees it.
			claim, err = s.claimLocked(ctx, conn, q, args, claimAgain)
		default:
			// The key has a row probe left to the full claim statement:
			// expired, or PROCESSING.
			claim, err = s.claimLocked(ctx, conn, q, args, claimSlow)
		}
	}
	return s.claimed(ctx, conn, tx, req, d, claim, err)
}

// probeArgs returns the parameters of probe and decide for req: $1 the
// key's lock, $2 key ID, $3 and $4 its payload lock pa, pb (see
// payloadLock); by pointer on a pool whose statements are described (see
// claimArgs), in one allocation.
func (s *Store) probeArgs(req idem.ClaimRequest, pa, pb int32) []any {
	if !s.describedArgs {
		return []any{keyLock(req.Key), req.Key.ID[:], pa, pb}
	}
	p := &probeParams{lock: argInt(keyLock(req.Key)), id: req.Key.ID[:], pa: argInt(pa), pb: argInt(pb)}
	p.args = [4]any{&p.lock, &p.id, &p.pa, &p.pb}
	return p.args[:]
}

// probeParams are probeArgs' parameters passed by pointer.
type probeParams struct {
	id           argBytes
	lock, pa, pb argInt
	args         [4]any
}

// claimBatch is the claim batch of claimTxPlain and what its replies
// said, in one allocation: the batch, its queued queries (pgx's
// Batch.Queue allocates each, and the slice grows as they are queued) and
// the answers its callbacks read.
type claimBatch struct {
	b    pgx.Batch
	ptrs [5]*pgx.QueuedQuery // b.QueuedQueries' array: COMMIT or probe, probe, the insert, BEGIN, SAVEPOINT
	qs   [4]pgx.QueuedQuery  // the ones queued after BeginTx's
	n    int                 // of qs used
	req  idem.ClaimRequest

	d               decision // probe's answer
	fresh, inserted bool     // the key had no row; the insert claimed it
}

// queue queues sql with args, as Batch.Queue does, in cb's own query.
func (cb *claimBatch) queue(sql string, args []any) *pgx.QueuedQuery {
	qq := &cb.qs[cb.n]
	cb.n++
	qq.SQL, qq.Arguments = sql, args
	cb.b.QueuedQueries = append(cb.b.QueuedQueries, qq)
	return qq
}

// probe reads probe's reply (pgx.QueuedQuery.Query's callback, without its
// wrapper).
func (cb *claimBatch) probe(br pgx.BatchResults) error {
	rows, _ := br.Query() // its error is rows.Err()
	defer rows.Close()
	var err error
	if cb.d, cb.fresh, err = scanProbe(rows, cb.req); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// insert reads the insert's command tag.
func (cb *claimBatch) insert(br pgx.BatchResults) error {
	ct, err := br.Exec()
	if err != nil {
		return err
	}
	cb.inserted = ct.RowsAffected() == 1
	return nil
}

// replayHintedTx is the read of a hinted claim (see finals) on conn, taken
// by ClaimTx: outside any transaction, after the COMMIT that a parked
// connection (pending) awaits, in the same round trip.
func (s *TxStore) replayHintedTx(ctx context.Context, conn *pgxpool.Conn, pending bool, req idem.ClaimRequest) (idem.Claim, bool, error) {
	if !pending {
		return s.replayHinted(ctx, conn, req)
	}
	var (
		c  idem.Claim
		ok bool
	)
	b := &pgx.Batch{}
	b.Queue(commitSQL)
	b.Queue(s.sql.final, req.Key.ID[:]).Query(func(rows pgx.Rows) error {
		var err error
		c, ok, err = scanFinal(rows)
		return err
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return idem.Claim{}, false, err
	}
	if !ok {
		s.finals.forget(req.Key)
	}
	return c, ok, nil
}

// batcher is what claimLocked needs of a connection or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// claimLocked runs the full claim statement and a savepoint after it (ROLLBACK
// TO goes to the newest of that name) on db, in the transaction that holds
// the key's lock, until it answers: after the fast claim statement (or
// probe and the insert) answered res, claimSlow (the row is takeable, or is
// this caller's own claim) or claimAgain (a conflicting row was committed
// after the claim's snapshot, by a lease-mode writer).
func (s *TxStore) claimLocked(ctx context.Context, db batcher, q txQueries, args []any, res claimResult) (idem.Claim, error) {
	var claim idem.Claim
	for attempt := 1; res != claimAnswered; attempt++ {
		if res == claimAgain {
			s.claimRetries.Add(1)
		}
		if attempt >= maxClaimAttempts {
			return idem.Claim{}, errors.New("the record kept changing under concurrent claims")
		}
		b := &pgx.Batch{}
		b.Queue(q.claim, args...).Query(func(rows pgx.Rows) error {
			var err error
			claim, res, err = scanClaim(rows, false)
			return err
		})
		b.Queue(q.savepoint)
		if err := db.SendBatch(ctx, b).Close(); err != nil {
			return idem.Claim{}, err
		}
	}
	return claim, nil
}

// decision is what decide answered.
type decision struct {
	kind  decideKind
	claim idem.Claim // decideFinal: the record; decideBusy: a PROCESSING record
}

type decideKind int

const (
	decideLocked decideKind = iota // no row: the key's lock is taken
	decideFinal                    // the key's final record
	decideBusy                     // another transaction holds the key's lock
)

// scanDecision reads decide's reply: no row (locked), or one row of the
// claim's eleven columns and a twelfth, busy: 0 for the final record, 1 for
// a key held by another transaction. A busy answer is a PROCESSING record
// with req's fingerprint; the caller asks otherPayload whether the
// holder's differs (the holder's own is not visible).
func scanDecision(rows pgx.Rows, req idem.ClaimRequest) (decision, error) {
	c, res, busy, err := scanClaimRow(rows, rawInt2)
	if err != nil || res == claimAgain {
		return decision{}, err
	}
	if busy == 0 {
		return decision{kind: decideFinal, claim: c}, nil
	}
	p := idem.Claim{Record: idem.Record{Status: idem.StatusProcessing, Fingerprint: req.Fingerprint}}
	return decision{kind: decideBusy, claim: p}, nil
}

// decideSQL returns decide, the statement that opens the batch of a
// partitioned or nested claim (ClaimTx on the plain table runs probe, its
// one-statement form: see probeSQL), for table t, where live is the
// condition of a live record c: $1 the key's lock, $2 key ID, $3 and $4 the
// lock that names the claimer's payload (see payloadLock). In one
// statement, without waiting and without an error: when a final record is
// visible (f: a replay) it returns it and locks nothing; otherwise it takes
// the payload lock, shared (nobody takes it exclusively: it never waits),
// so that whoever holds the key's lock also holds its payload's, and tries
// the key's lock (l). When it gets it, it marks it in idemgen.key_locked
// for the claim statement and returns no row (k: the last branch reads k,
// which it never returns, so that k runs). When another transaction holds
// it, it returns a busy row; busySQL then tells which payload the holder
// runs (a pg_locks test here would cost every claim the set-up of its
// function scans).
func decideSQL(t, live string) string {
	return fmt.Sprintf(`WITH f AS MATERIALIZED (
	SELECT c.status, c.fingerprint, c.scheme, c.token, c.body, c.err_code, c.err_message, c.meta
	FROM %[1]s c
	WHERE c.key = $2::bytea AND c.status <> 1 AND %[2]s
), l AS MATERIALIZED (
	SELECT pg_advisory_xact_lock_shared($3::int, $4::int) AS shared, pg_try_advisory_xact_lock($1::bigint) AS locked
	WHERE NOT EXISTS (SELECT 1 FROM f)
), k AS MATERIALIZED (
	SELECT set_config('idemgen.key_locked', 'on', true) AS v FROM l WHERE l.locked
)
SELECT false, false, status, fingerprint, scheme, token, interval '0', body, err_code, err_message, meta, 0::smallint
FROM f
UNION ALL
SELECT false, false, 1::smallint, NULL::bytea, 0, 0::bigint, interval '0', NULL::bytea, NULL::bytea, NULL::bytea, NULL::bytea, 1::smallint
FROM l WHERE NOT l.locked
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM k WHERE k.v IS NULL`, t, live)
}

// probeSQL returns probe, the statement that opens ClaimTx's batch on the
// plain table t: decide's answers (see decideSQL) in one plain SELECT, with
// the same parameters, no CTE and always one row. It reads the key's row,
// if any, by its primary key; the CASE then evaluates in order, each branch
// only when the ones before it did not match: a live final record answers
// 0 (a replay; no lock); otherwise it takes the payload lock (shared), tries
// the key's lock and, when it gets it, marks it in idemgen.key_locked,
// 'fresh' when the key has no row at all (the insert of the batch claims it)
// or 'on' when it has one (expired, or PROCESSING: the full claim statement
// decides), and answers 3 or 4; when another transaction holds the key's
// lock it answers 1, busy, and ClaimTx asks busySQL which payload the
// holder runs. (A pg_locks test inside probe, even on a branch that never
// runs, cost every first call the set-up of its function scans: see
// docs/decisions/pgstore-hot-paths.md §7 and bench/README.md.)
func probeSQL(t string) string {
	return fmt.Sprintf(`SELECT c.status, c.fingerprint, c.scheme, c.token, c.body, c.err_code, c.err_message, c.meta,
	CASE WHEN c.status <> 1 AND c.expires_at > %[2]s THEN 0
		WHEN pg_advisory_xact_lock_shared($3::int, $4::int)::text IS NULL THEN NULL
		WHEN pg_try_advisory_xact_lock($1::bigint) THEN
			CASE WHEN set_config('idemgen.key_locked', CASE WHEN c.key IS NULL THEN 'fresh' ELSE 'on' END, true) = 'fresh' THEN 3 ELSE 4 END
		ELSE 1 END::smallint
FROM (SELECT) one LEFT JOIN %[1]s c ON c.key = $2::bytea`, t, ts)
}

// busySQL tells, for a key whose lock another transaction holds (probe
// answered 1), whether the holder runs another payload: 2 when the holder
// holds another payload lock of the key ($2: the key's, $3 this payload's;
// see payloadLock) and not this one, else 1 (also when the holder is gone:
// bool_or of no rows is NULL). $1 is the key's lock. It reads pg_locks
// once; it runs only on this path, in the transaction of the claim.
const busySQL = `SELECT CASE WHEN bool_or(p.objid <> $3::int::oid) AND NOT bool_or(p.objid = $3::int::oid) THEN 2 ELSE 1 END::smallint
FROM pg_locks x JOIN pg_locks p ON p.pid = x.pid
WHERE x.locktype = 'advisory' AND x.granted AND x.mode = 'ExclusiveLock' AND x.objsubid = 1
	AND x.classid = (($1::bigint >> 32) & 4294967295)::oid AND x.objid = ($1::bigint & 4294967295)::oid
	AND p.locktype = 'advisory' AND p.granted AND p.objsubid = 2 AND p.classid = $2::int::oid`

// rowQuerier is what otherPayload needs of a connection or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// otherPayload asks, in db's transaction, whether the holder of req's key
// runs another payload (see busySQL): one round trip, on the busy path
// only.
func otherPayload(ctx context.Context, db rowQuerier, req idem.ClaimRequest) (bool, error) {
	pa, pb := payloadLock(req.Key, req.Fingerprint)
	var busy int16
	if err := db.QueryRow(ctx, busySQL, keyLock(req.Key), pa, pb).Scan(&busy); err != nil {
		return false, err
	}
	return busy == 2, nil
}

// busyPayload completes the answer of a busy decision d: when the holder
// runs another payload (otherPayload), the PROCESSING record's fingerprint
// is made to differ from req's.
func busyPayload(ctx context.Context, db rowQuerier, req idem.ClaimRequest, d *decision) error {
	other, err := otherPayload(ctx, db, req)
	if other {
		for i := range d.claim.Record.Fingerprint {
			d.claim.Record.Fingerprint[i] ^= 0xff
		}
	}
	return err
}

// insertSQL returns the claim of ClaimTx's batch for a key probe found
// without a row ('fresh'): a plain insert, with the parameters of the
// claim statements (claimArgs). It inserts nothing otherwise, and nothing
// on a conflict (a lease-mode writer's row committed after probe's
// snapshot); the full claim statement then decides.
func insertSQL(t string) string {
	return fmt.Sprintf(`INSERT INTO %[1]s (key, tenant, op, key_text, fingerprint, scheme, status, token,
	lease_until, created_at, expires_at, sweep_at)
SELECT $1::bytea, $3::bytea, $4::bytea, $5::bytea, $6::bytea, $9::int, 1, $2::bigint,
	%[2]s + %[3]s, %[2]s, %[2]s + %[4]s, %[2]s + %[4]s
WHERE current_setting('idemgen.key_locked', true) = 'fresh'
ON CONFLICT (key) DO NOTHING`, t, ts, us("$7"), us("$8"))
}

// scanProbe reads probe's reply (see probeSQL). A locked key is
// decideLocked with fresh reporting whether it had no row; a busy one is a
// PROCESSING record with req's fingerprint (the caller asks otherPayload
// whether the holder's differs).
func scanProbe(rows pgx.Rows, req idem.ClaimRequest) (d decision, fresh bool, err error) {
	defer rows.Close()
	if !rows.Next() {
		return d, false, errors.Join(rows.Err(), errors.New("probe returned no row"))
	}
	var busy int16
	if v, ok := rawValues(rows, probeKinds); ok {
		if v[8] == nil {
			return d, false, errors.New("probe answered nothing")
		}
		if busy = rawInt16(v[8]); busy == 0 {
			rec, err := rawRecord(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7])
			if err != nil {
				return d, false, fmt.Errorf("probe answered a record without its status: %w", err)
			}
			d.claim.Record, d.kind = rec, decideFinal
		}
	} else if d, busy, err = scanProbeColumns(rows); err != nil {
		return d, false, err
	}
	if err := rows.Err(); err != nil {
		return decision{}, false, err
	}
	switch busy {
	case 0:
		return d, false, nil
	case 3, 4:
		return decision{kind: decideLocked}, busy == 3, nil
	}
	// Busy: a PROCESSING record of req's payload, until otherPayload
	// tells (see claimTxPlain).
	p := idem.Claim{Record: idem.Record{Status: idem.StatusProcessing, Fingerprint: req.Fingerprint}}
	return decision{kind: decideBusy, claim: p}, false, nil
}

// scanProbeColumns is scanProbe's read of a row that is not decoded raw:
// Rows.Scan. A final record (busy 0) is in d.
func scanProbeColumns(rows pgx.Rows) (d decision, busy int16, err error) {
	var (
		status    *int16
		fp        []byte
		scheme    *int32
		token     *int64
		code, msg []byte
		out       idem.Outcome
		b         *int16
	)
	if err := rows.Scan(&status, &fp, &scheme, &token, &out.Body, &code, &msg, &out.Meta, &b); err != nil {
		return d, 0, err
	}
	if b == nil {
		return d, 0, errors.New("probe answered nothing")
	}
	if *b == 0 {
		if status == nil || scheme == nil || token == nil {
			return d, 0, errors.New("probe answered a record without its status")
		}
		d.claim.Record = record(*status, fp, *scheme, *token, out, code, msg)
		d.kind = decideFinal
	}
	return d, *b, nil
}

// txQueries are the statements of ClaimTx's batch: their SQL, or the names
// of their prepared statements. On the plain table, decide is probe and fast
// the insert (see probeSQL); in a nested claim, decide and the fast claim
// statement.
type txQueries struct{ decide, fast, claim, begin, savepoint string }

// names returns the names ClaimTx prepares q's statements under: idemgen_
// and 24 hex digits of the SHA-256 of the SQL.
func (q txQueries) names() txQueries {
	n := func(sql string) string {
		sum := sha256.Sum256([]byte(sql))
		return "idemgen_" + hex.EncodeToString(sum[:12])
	}
	return txQueries{n(q.decide), n(q.fast), n(q.claim), n(q.begin), n(q.savepoint)}
}

// batchQueries returns what ClaimTx's batch queues on c: with pgx's default
// QueryExecModeCacheStatement, the names of the statements, prepared on the
// connection's first use of them (one round trip each, once); in the other
// modes (chosen for poolers that keep no prepared statements), their SQL.
// Prepared by name, they are described once per connection and never
// evicted by pgx's statement cache. A parked connection (prepared) ran
// them already. (A Prepare inside the transaction of a parked connection
// would be fine too, but costs a round trip to look up.)
//
// The mode is the pool's (read once by NewTx: pgx.Conn.Config copies the
// whole configuration on every call).
func (s *TxStore) batchQueries(ctx context.Context, c *pgx.Conn, prepared bool) (txQueries, error) {
	if !s.prepare {
		return s.sql.txText, nil
	}
	if prepared {
		return s.sql.txNames, nil // a parked connection has them
	}
	names, sqls := &s.sql.txNames, &s.sql.txText
	for _, p := range [...][2]string{
		{names.decide, sqls.decide}, {names.fast, sqls.fast}, {names.claim, sqls.claim},
		{names.begin, sqls.begin}, {names.savepoint, sqls.savepoint},
	} {
		if _, err := c.Prepare(ctx, p[0], p[1]); err != nil {
			return txQueries{}, err
		}
	}
	return s.sql.txNames, nil
}

// acquireConn takes a connection for a claim: a parked one (pending: its
// transaction awaits a COMMIT, which the claim's batch sends first), or one
// of the pool. When every
// connection of the pool is in use (held by running calls), it waits for
// one at most max(wait, the store's acquire timeout), then fails with an
// error wrapping idem.ErrStoreBusy; while the pool may still open a
// connection, only ctx bounds the wait (opening one takes as long as it
// takes).
func (s *TxStore) acquireConn(ctx context.Context, wait time.Duration) (conn *pgxpool.Conn, pending bool, err error) {
	if c := s.parking.take(); c != nil {
		return c, true, nil
	}
	if st := s.pool.Stat(); st.AcquiredConns()+st.ConstructingConns() < st.MaxConns() {
		conn, err = s.pool.Acquire(ctx)
		return conn, false, err
	}
	limit := max(wait, s.acquire)
	actx, cancel := context.WithTimeout(ctx, limit)
	conn, err = s.pool.Acquire(actx)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		st := s.pool.Stat()
		err = fmt.Errorf("the pool's connections are all in use (%d of %d) and none freed up within %v: %w",
			st.AcquiredConns(), st.MaxConns(), limit, idem.ErrStoreBusy)
	}
	return conn, false, err
}

// claimed ends a claim batch of either layout: an error ends the
// connection's transaction and releases it, an answer that is not a claim
// is returned at once while the transaction (which wrote nothing) is
// committed in the background (see finish), and a claim becomes the
// caller's open transaction tx.
func (s *TxStore) claimed(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, req idem.ClaimRequest, d decision, claim idem.Claim, err error) (idem.Claim, *txn, bool, error) {
	if err != nil {
		if uncertain(err) {
			// Hang up: the server rolls back whatever it received.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
			conn.Release()
		} else {
			end(ctx, conn)
		}
		return idem.Claim{}, nil, false, fail("claim", req.Key, err)
	}
	switch d.kind {
	case decideFinal:
		s.finals.add(req.Key)
		s.finish(conn, false)
		return d.claim, nil, false, nil
	case decideBusy:
		s.finish(conn, false)
		return d.claim, nil, true, nil
	}
	if !claim.Claimed {
		s.finals.noteClaim(req.Key, claim)
		s.finish(conn, true)
		return claim, nil, false, nil
	}
	t := &txn{store: s, conn: conn, key: req.Key, token: req.Token}
	t.mtx = &methodTx{Tx: tx, owner: t}
	s.open.Store(req.Token, req.Key.ID)
	return claim, t, false, nil
}

// finish ends, off the caller's path, the transaction of a claim batch
// that claimed nothing, and returns its connection to the pool. The
// transaction wrote nothing (decide and the claim statements write only
// when they claim), so it is committed rather than rolled back: a replay
// does not count as a rollback in pg_stat_database. When it holds no lock
// of the key (a replay, a busy duplicate: idle, it holds at most a shared
// payload lock), the connection is parked for the next ClaimTx, which
// commits first in its own batch (see parking); otherwise (or when the
// parking is full) a goroutine commits it at once.
func (s *TxStore) finish(conn *pgxpool.Conn, keyLocked bool) {
	if !keyLocked && s.parking.park(conn) {
		return
	}
	go commitAndRelease(conn)
}

// Renew implements idem.Renewer. A claim held by one of this store's open
// transactions needs no lease (the transaction holds the key until it
// ends): Renew answers nil while the transaction is open. Any other record
// is renewed as in lease mode.
func (s *TxStore) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	if id, ok := s.open.Load(token); ok && id.([32]byte) == key.ID {
		return nil
	}
	return s.Store.Renew(ctx, key, token, lease)
}

// end rolls back whatever transaction conn is in and returns it to the pool
// (which closes it if the rollback failed).
func end(ctx context.Context, conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
		_, _ = conn.Exec(ctx, rollbackSQL)
	}
	conn.Release()
}

// txn is a claim held in an open transaction.
type txn struct {
	store  *TxStore
	flight *flight // ended once the transaction is
	conn   *pgxpool.Conn
	mtx    *methodTx
	key    idem.Key
	token  idem.Token
	done   atomic.Bool
	keeper // the final records of nested calls (keep.go)
	// mayHoldSessionLocks is set while a discard that rewrites kept
	// records may have left session-level locks on the connection (see
	// queueDiscard): the connection is then closed, not pooled.
	mayHoldSessionLocks atomic.Bool
}

// endConn ends the transaction (rolling back what is left) and gives the
// connection back to the pool, or closes it when it may still hold
// session-level locks.
func (t *txn) endConn(ctx context.Context) {
	if t.mayHoldSessionLocks.Load() {
		_ = t.conn.Conn().Close(context.WithoutCancel(ctx))
		t.conn.Release()
		return
	}
	end(ctx, t.conn)
}

// endFlight ends the key's flight, once the transaction has ended: the
// duplicates that wait for it claim again.
func (t *txn) endFlight() {
	if t.flight != nil {
		t.store.flights.end(t.flight)
	}
}

var errTxnDone = errors.New("transaction already completed or released")

// Context implements idem.Txn: ctx carrying the transaction for TxFrom.
func (t *txn) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, t.mtx)
}

// Complete implements idem.Txn: in one round trip it rolls back to the
// savepoint (with discardWrites), stores out in the claimed row and commits.
func (t *txn) Complete(ctx context.Context, out idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if !t.done.CompareAndSwap(false, true) {
		return fail("complete", t.key, errTxnDone)
	}
	t.mtx.closed.Store(true)
	t.store.open.Delete(t.token)
	args, err := completeArgs(t.key, t.token, out, ttl)
	if err != nil {
		t.endConn(ctx)
		t.endFlight()
		return err
	}
	b := &pgx.Batch{}
	if discardWrites {
		queueDiscard(b, t.store.sql.reapply, t.list(), &t.mayHoldSessionLocks)
	}
	var updated, committed bool
	t.store.queuePlanGeneric(b)
	b.Queue(t.store.sql.complete, args...).Exec(func(ct pgconn.CommandTag) error {
		updated = ct.RowsAffected() == 1
		if !updated {
			return errors.New("the claimed row is gone")
		}
		return nil
	})
	b.Queue(commitSQL).Exec(func(ct pgconn.CommandTag) error {
		committed = ct.String() == commitSQL
		if !committed {
			return errors.New("the transaction was aborted (a statement of the method failed and was ignored?) and rolled back")
		}
		return nil
	})
	err = t.conn.SendBatch(ctx, b).Close()
	t.endConn(ctx)
	defer t.endFlight()
	if err != nil && uncertain(err) && t.store.committed(ctx, t.key, t.token) {
		// The COMMIT was sent and its reply lost, but it committed.
		t.store.finals.add(t.key)
		return nil
	}
	if err != nil {
		return fail("complete", t.key, err)
	}
	t.store.finals.add(t.key)
	return nil
}

// committed reports whether the key's record holds token's final outcome,
// once no transaction writes the key any more: it resolves a COMMIT whose
// reply was lost. It asks on a connection of its own and a context detached
// from the caller's, bounded by settleTimeout; when it cannot tell, it
// answers false (the caller is told the call failed; a retry replays the
// outcome if it did commit).
func (s *Store) committed(ctx context.Context, key idem.Key, token idem.Token) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.sql.settle, key.ID[:])
	b.Queue("ROLLBACK")
	var done bool
	b.Queue(s.sql.completeCheck, key.ID[:], int64(token)).QueryRow(func(r pgx.Row) error { return r.Scan(&done) })
	return s.pool.SendBatch(ctx, b).Close() == nil && done
}

// Release implements idem.Txn: it rolls the transaction back, claim and
// method writes alike. A connection that is already broken needs no
// rollback: the server rolls its transaction back and commits nothing.
func (t *txn) Release(ctx context.Context) error {
	if !t.done.CompareAndSwap(false, true) {
		return fail("release", t.key, errTxnDone)
	}
	t.mtx.closed.Store(true)
	t.store.open.Delete(t.token)
	defer t.endFlight()
	defer t.conn.Release()
	if t.conn.Conn().IsClosed() {
		return nil
	}
	if t.mayHoldSessionLocks.Load() {
		// Closing the session ends its transaction and every lock it holds.
		_ = t.conn.Conn().Close(context.WithoutCancel(ctx))
		return nil
	}
	if _, err := t.conn.Exec(ctx, rollbackSQL); err != nil {
		if t.conn.Conn().IsClosed() {
			return nil
		}
		return fail("release", t.key, err)
	}
	return nil
}

type txKey struct{}

// TxFrom returns the transaction of the idempotent call that ctx belongs to,
// inside a method run by an idem.Executor on a TxStore. Write the method's
// business rows through it, so that they commit with the outcome or not at
// all. The executor ends the transaction: Commit and Rollback of the returned
// Tx return ErrTxOwned (use Begin for a nested savepoint, or BeginTx, which
// also covers the case with no claim), and the Tx is closed
// (pgx.ErrTxClosed) once the call is over.
func TxFrom(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*methodTx)
	return tx, ok
}

// ErrTxOwned is returned by Commit and Rollback of the transaction TxFrom
// returns: the executor commits it with the outcome, or rolls it back when the
// method returns a transient error.
var ErrTxOwned = errors.New("pgstore: the idempotency transaction is ended by the executor: return from the method instead")

// methodTx is the transaction as the method sees it: every pgx.Tx method but
// Commit and Rollback, until the call is over.
type methodTx struct {
	pgx.Tx
	owner  *txn
	closed atomic.Bool
}

func (m *methodTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if m.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return m.Tx.Begin(ctx)
}

func (m *methodTx) Commit(context.Context) error   { return ErrTxOwned }
func (m *methodTx) Rollback(context.Context) error { return ErrTxOwned }

func (m *methodTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if m.closed.Load() {
		return 0, pgx.ErrTxClosed
	}
	return m.Tx.CopyFrom(ctx, table, cols, src)
}

func (m *methodTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if m.closed.Load() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return m.Tx.SendBatch(ctx, b)
}

func (m *methodTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if m.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return m.Tx.Prepare(ctx, name, sql)
}

func (m *methodTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if m.closed.Load() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return m.Tx.Exec(ctx, sql, args...)
}

func (m *methodTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if m.closed.Load() {
		return nil, pgx.ErrTxClosed
	}
	return m.Tx.Query(ctx, sql, args...)
}

func (m *methodTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if m.closed.Load() {
		return errRow{pgx.ErrTxClosed}
	}
	return m.Tx.QueryRow(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

var (
	_ idem.TxStore = (*TxStore)(nil)
	_ idem.Renewer = (*TxStore)(nil)
	_ idem.Txn     = (*txn)(nil)
	_ pgx.Tx       = (*methodTx)(nil)
)
