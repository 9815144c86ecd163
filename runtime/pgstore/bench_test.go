package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// The benchmarks run each path through idem.Do ("idem") and, in the same
// run, the same SQL through raw pgx with no framework ("raw"): the floor.
// Compare ns/op of the pairs:
//
//	go test -bench . -run '^$' ./runtime/pgstore
//
// "c1" is one caller in a loop, "c16" 16 concurrent callers.

type benchEnv struct {
	pool    *pgxpool.Pool
	lease   *pgstore.Store
	tx      *pgstore.TxStore
	claim   string
	done    string
	claimTx string
	decide  string
	seq     atomic.Int64
	prefix  string
}

func newBenchEnv(b *testing.B) *benchEnv {
	pool := newPool(b, 20, nil)
	table := newTable(b, pool)
	e := &benchEnv{pool: pool, lease: pgstore.New(pool, pgstore.WithTable(table)),
		tx: pgstore.NewTx(pool, pgstore.WithTable(table)), prefix: randHex(4)}
	e.claim, e.done, _ = e.lease.SQL()
	e.decide, e.claimTx, _ = e.lease.PlainTxSQL()
	return e
}

var benchMethod = idem.Method{Op: "bench.Op", TTL: time.Hour, Lease: time.Minute}

func doCall(ex *idem.Executor, id string) error {
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.String("payload")
	_, err := idem.Do(context.Background(), ex, &benchMethod, &k, &h, func(context.Context) (int, error) { return 42, nil })
	return err
}

// rawKey stands for the key and fingerprint building the raw baseline skips.
func rawKey(id string) ([]byte, []byte) {
	k := sha256.Sum256([]byte(id))
	return k[:], make([]byte, 32)
}

func rawClaimArgs(id string) []any {
	k, f := rawKey(id)
	return []any{k, int64(binary.BigEndian.Uint64(k)), []byte(""), []byte(benchMethod.Op), []byte(id), f,
		int64(time.Minute / time.Microsecond), int64(time.Hour / time.Microsecond), int32(0)}
}

func scanRaw(rows pgx.Rows) error {
	var slow bool
	return scanRawWith(rows, &slow)
}

// scanRawWith reads the claim's eleven columns and a twelfth into last.
func scanRawWith(rows pgx.Rows, last any) error {
	var (
		claimed, taken bool
		status         int16
		fp, body, meta []byte
		scheme         int32
		token          int64
		left           pgtype.Interval
		code, msg      []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&claimed, &taken, &status, &fp, &scheme, &token, &left, &body, &code, &msg, &meta, last}, func() error { return nil })
	return err
}

func (e *benchEnv) rawLeaseFirst(id string) error {
	ctx := context.Background()
	args := rawClaimArgs(id)
	rows, err := e.pool.Query(ctx, e.claim, args...)
	if err != nil {
		return err
	}
	if err := scanRaw(rows); err != nil {
		return err
	}
	_, err = e.pool.Exec(ctx, e.done, args[0], args[1], int16(2), []byte("42"), []byte(nil), []byte(nil), []byte(nil),
		int64(time.Hour/time.Microsecond))
	return err
}

func (e *benchEnv) rawLeaseReplay(id string) error {
	rows, err := e.pool.Query(context.Background(), e.claim, rawClaimArgs(id)...)
	if err != nil {
		return err
	}
	return scanRaw(rows)
}

// rawTx is the transactional path by hand: decide, the claim, BEGIN and
// the savepoint in one batch, then the outcome and COMMIT (first call); a
// replay's COMMIT is sent after the answer, as ClaimTx does.
func (e *benchEnv) rawTx(id string, first bool) error {
	ctx := context.Background()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	args := rawClaimArgs(id)
	b := &pgx.Batch{}
	b.Queue(e.decide, args[1], args[0], int32(1), int32(2)).Query(scanProbe)
	b.Queue(e.claimTx, args...).Exec(func(pgconn.CommandTag) error { return nil })
	b.Queue("BEGIN")
	b.Queue(pgstore.SavepointSQL)
	err = conn.SendBatch(ctx, b).Close()
	if err != nil || !first {
		go func() {
			_, _ = conn.Exec(ctx, "COMMIT")
			conn.Release()
		}()
		return err
	}
	defer conn.Release()
	b = &pgx.Batch{}
	b.Queue(e.done, args[0], args[1], int16(2), []byte("42"), []byte(nil), []byte(nil), []byte(nil),
		int64(time.Hour/time.Microsecond))
	b.Queue("COMMIT")
	return conn.SendBatch(ctx, b).Close()
}

// scanProbe reads probe's reply: the record's columns and busy.
func scanProbe(rows pgx.Rows) error {
	var (
		status         *int16
		fp, body, meta []byte
		scheme         *int32
		token          *int64
		code, msg      []byte
		busy           *int16
	)
	_, err := pgx.ForEachRow(rows, []any{&status, &fp, &scheme, &token, &body, &code, &msg, &meta, &busy}, func() error { return nil })
	return err
}

func run(b *testing.B, callers int, fn func(i int64) error) {
	var n atomic.Int64
	if callers == 1 {
		for b.Loop() {
			if err := fn(n.Add(1)); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := fn(n.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkStore(b *testing.B) {
	e := newBenchEnv(b)
	exLease, exTx := idem.NewExecutor(e.lease, idem.SingleTenant()), idem.NewExecutor(e.tx, idem.SingleTenant())
	// Replays cycle over completed keys.
	const replayKeys = 64
	for _, ex := range []*idem.Executor{exLease, exTx} {
		for i := range replayKeys {
			if err := doCall(ex, fmt.Sprintf("%s-replay-%p-%d", e.prefix, ex, i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	replayID := func(ex *idem.Executor, i int64) string {
		return fmt.Sprintf("%s-replay-%p-%d", e.prefix, ex, i%replayKeys)
	}
	rawReplayID := func(i int64) string { return fmt.Sprintf("%s-rawreplay-%d", e.prefix, i%replayKeys) }
	for i := range int64(replayKeys) {
		if err := e.rawLeaseFirst(rawReplayID(i)); err != nil {
			b.Fatal(err)
		}
	}
	fresh := func(tag string, i int64) string { return fmt.Sprintf("%s-%s-%d-%d", e.prefix, tag, e.seq.Add(1), i) }

	for _, callers := range []int{1, 16} {
		c := fmt.Sprintf("c%d", callers)
		b.Run("lease/first/idem/"+c, func(b *testing.B) {
			run(b, callers, func(i int64) error { return doCall(exLease, fresh("lf", i)) })
		})
		b.Run("lease/first/raw/"+c, func(b *testing.B) {
			run(b, callers, func(i int64) error { return e.rawLeaseFirst(fresh("rlf", i)) })
		})
		b.Run("lease/replay/idem/"+c, func(b *testing.B) {
			run(b, callers, func(i int64) error { return doCall(exLease, replayID(exLease, i)) })
		})
		b.Run("lease/replay/raw/"+c, func(b *testing.B) {
			run(b, callers, func(i int64) error { return e.rawLeaseReplay(rawReplayID(i)) })
		})
		b.Run("tx/first/idem/"+c, func(b *testing.B) {
			run(b, callers, func(i int64) error { return doCall(exTx, fresh("tf", i)) })
		})
		b.Run("tx/first/raw/"+c, func(b *testing.B) {
			run(b, callers, func(i int64) error { return e.rawTx(fresh("rtf", i), true) })
		})
		b.Run("tx/replay/idem/"+c, func(b *testing.B) {
			run(b, callers, func(i int64) error { return doCall(exTx, replayID(exTx, i)) })
		})
		b.Run("tx/replay/raw/"+c, func(b *testing.B) {
			run(b, callers, func(i int64) error { return e.rawTx(rawReplayID(i), false) })
		})
	}
}
