package sqlitestore_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// BenchmarkSQLite times each path through idem.Do (a wrapped call) and, in
// the same iterations, the same SQL through the same driver on the same
// file with no framework (the floor), and reports both and their ratio:
//
//	go test -run '^$' -bench BenchmarkSQLite ./ (in runtime/sqlitestore)
//
// "first" is a call on a fresh key (claim, method, outcome), "replay" a
// retry of a decided key. The file is in WAL mode with synchronous=FULL
// (Open's settings), so a first call's commits wait for fsync.
func BenchmarkSQLite(b *testing.B) {
	for _, mode := range []string{"lease", "tx"} {
		for _, path := range []string{"first", "replay"} {
			b.Run(mode+"/"+path, func(b *testing.B) { benchPath(b, mode, path) })
		}
	}
}

var benchMethod = idem.Method{Op: "bench.Op", TTL: time.Hour, Lease: time.Minute}

func benchPath(b *testing.B, mode, path string) {
	db, _ := openDB(b)
	var store idem.Store = sqlitestore.New(db)
	if mode == "tx" {
		store = sqlitestore.NewTx(db)
	}
	ex := idem.NewExecutor(store, idem.SingleTenant())
	ctx := context.Background()
	call := func(id string) {
		var k idem.KeyParts
		k.String("id", id)
		var h idem.Hasher
		h.String("payload")
		_, err := idem.Do(ctx, ex, &benchMethod, &k, &h, func(context.Context) (int, error) { return 42, nil })
		if err != nil {
			b.Fatal(err)
		}
	}
	floor := rawFirst
	if path == "replay" {
		floor = rawReplay
		call("replayed")
		rawFirst(b, db, mode, "raw-replayed")
	}
	var wrapped, raw time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		id, rawID := "replayed", "raw-replayed"
		if path == "first" {
			id, rawID = fmt.Sprint("k", i), fmt.Sprint("raw", i)
		}
		// Alternate which goes first, so that neither gains from the
		// other's warm caches.
		if i%2 == 0 {
			start := time.Now()
			call(id)
			mid := time.Now()
			floor(b, db, mode, rawID)
			wrapped += mid.Sub(start)
			raw += time.Since(mid)
		} else {
			start := time.Now()
			floor(b, db, mode, rawID)
			mid := time.Now()
			call(id)
			raw += mid.Sub(start)
			wrapped += time.Since(mid)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(wrapped.Nanoseconds())/n, "wrapped-ns/op")
	b.ReportMetric(float64(raw.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(wrapped)/float64(raw), "x-floor")
}

const (
	rawSelect = `SELECT status, fingerprint, scheme, token, lease_until, expires_at, body, err_code, err_message, meta
FROM idem_records WHERE key = ?`
	rawInsert = `INSERT OR REPLACE INTO idem_records (key, token, lease_until, expires_at, created_at, scheme, status,
	fingerprint, tenant, op, key_text) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)`
	rawComplete = `UPDATE idem_records SET status = ?, body = ?, err_code = ?, err_message = ?, meta = ?,
	lease_until = ?, expires_at = ? WHERE key = ? AND token = ? AND status = 1 AND expires_at > ?`
)

// rawRead is the store's read of a key outside the write lock.
func rawRead(b *testing.B, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, k []byte) {
	var (
		status, scheme, token, lease, exp int64
		fp, body, code, msg, meta         []byte
	)
	err := q.QueryRowContext(context.Background(), rawSelect, k).Scan(&status, &fp, &scheme, &token, &lease, &exp, &body, &code, &msg, &meta)
	if err != nil && err != sql.ErrNoRows {
		b.Fatal(err)
	}
}

// rawFirst is the SQL of a first call: the read, then in one write
// transaction (lease mode: two) the read again, the claim and the outcome.
func rawFirst(b *testing.B, db *sql.DB, mode, id string) {
	ctx := context.Background()
	k := sha256.Sum256([]byte(id))
	fp := make([]byte, 32)
	now := time.Now().UnixNano()
	rawRead(b, db, k[:])
	conn, err := db.Conn(ctx)
	require.NoError(b, err)
	defer conn.Close()
	exec := func(q string, args ...any) {
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			b.Fatal(err)
		}
	}
	exec("BEGIN IMMEDIATE")
	rawRead(b, conn, k[:])
	exec(rawInsert, k[:], 7, now+int64(time.Minute), now+int64(time.Hour), now, 0, fp, []byte{}, []byte(benchMethod.Op), []byte(id))
	if mode == "tx" {
		exec("SAVEPOINT idem_method")
	} else {
		exec("COMMIT")
		exec("BEGIN IMMEDIATE")
	}
	exec(rawComplete, 2, []byte("42"), []byte{}, []byte{}, nil, now, now+int64(time.Hour), k[:], 7, now)
	exec("COMMIT")
}

// rawReplay is the SQL of a replay: the read.
func rawReplay(b *testing.B, db *sql.DB, _, id string) {
	k := sha256.Sum256([]byte(id))
	rawRead(b, db, k[:])
}
