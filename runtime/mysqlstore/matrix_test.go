package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv/mysqlenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// The configurations users run (issue 34), as a matrix: pools of 1, 2, 4
// and 64 connections × lease and transactional mode × the server's
// max_allowed_packet (MariaDB's stock 16 MiB, and a small 1 MiB) × the
// pool's isolation level (READ UNCOMMITTED to SERIALIZABLE) × the
// driver's packet limit (the documented maxAllowedPacket=0, the server's;
// and the driver's own default, 64 MiB, larger than the server's) ×
// outcome sizes around the limit. Each cell runs concurrent duplicates of
// calls of every size, then retries, then small calls on the same pool,
// and asserts: every method ran exactly once, every call was answered (the
// result, or idem.ErrOutcomeNotStored for an outcome the server cannot
// take) within a generous bound, no record is left PROCESSING, and the
// answers after a refused outcome are stored (no poisoned statement).
//
// The server is one of the test's own (mysqlenv.Dedicated): the matrix
// sets its global max_allowed_packet. IDEM_MATRIX=full runs every cell
// (128); the default (24) runs pools 1 and 4 with the stock limit and
// every pool with the small one, each pool size at one isolation level (1:
// READ UNCOMMITTED, 2: READ COMMITTED, 4: REPEATABLE READ, 64:
// SERIALIZABLE), under a minute and a half with -race on a loaded 2-core
// machine.
func TestConfigMatrix(t *testing.T) {
	dsn := mysqlenv.Dedicated(t)
	full := os.Getenv("IDEM_MATRIX") == "full"
	admin := matrixDB(t, dsn, 0, 2, "")
	for _, limit := range []int64{16 << 20, 1 << 20} {
		_, err := admin.Exec(fmt.Sprintf("SET GLOBAL max_allowed_packet = %d", limit))
		require.NoError(t, err)
		for p, pool := range []int{1, 2, 4, 64} {
			if !full && limit == 16<<20 && (pool == 2 || pool == 64) {
				continue
			}
			// The pool's isolation level: all four in the full run; by
			// default one per pool size, so that every level runs.
			levels := isolationLevels[p : p+1]
			if full {
				levels = isolationLevels
			}
			for _, level := range levels {
				for _, driverPacket := range []int{0, -1} {
					for _, mode := range []string{"lease", "tx"} {
						name := fmt.Sprintf("packet=%dKiB/pool=%d/%s/dsn=%s/%s", limit>>10, pool, level,
							map[int]string{0: "server", -1: "default"}[driverPacket], mode)
						t.Run(name, func(t *testing.T) {
							matrixCell(t, matrixDB(t, dsn, driverPacket, pool, level), limit, mode)
						})
					}
				}
			}
		}
	}
}

// matrixDB opens a pool of maxConns connections to the dedicated server;
// driverPacket is the DSN's maxAllowedPacket (0: the server's; -1: the
// driver's default), level the sessions' tx_isolation ("": the server's).
func matrixDB(t testing.TB, dsn string, driverPacket, maxConns int, level string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	if driverPacket >= 0 {
		cfg.MaxAllowedPacket = driverPacket
	}
	if level != "" {
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["tx_isolation"] = "'" + level + "'"
	}
	cfg.Timeout = 10 * time.Second
	cfg.Logger = &mysql.NopLogger{}
	c, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func matrixCell(t *testing.T, db *sql.DB, limit int64, mode string) {
	table := newTable(t, db)
	ledger := newLedger(t, db)
	var store idem.Store = mysqlstore.New(db, mysqlstore.WithTable(table))
	if mode == "tx" {
		store = mysqlstore.NewTx(db, mysqlstore.WithTable(table))
	}
	ex := idem.NewExecutor(store, idem.SingleTenant())
	m := &idem.Method{Op: "matrix.Get", TTL: time.Hour, Lease: time.Hour, Wait: 30 * time.Second}

	// The store's own limit is the server's less a few KiB (the
	// statement's other arguments); a string result is stored as JSON,
	// two bytes more than the string.
	const margin = 4 << 10
	sizes := []int{
		10,
		int(limit) - margin - 64 - 2, // fits
		int(limit) - margin + 64 - 2, // refused by the store, would fit the server's packet
		int(limit) + 1<<10,           // refused by the server too
	}
	const dups = 2
	type key struct {
		id   string
		size int
		runs atomic.Int32
	}
	var keys []*key
	for _, n := range sizes {
		for range 2 {
			keys = append(keys, &key{id: "k-" + randHex(6), size: n})
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	method := func(k *key) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			k.runs.Add(1)
			if tx, ok := mysqlstore.TxFrom(ctx); ok {
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+ledger+" (order_id, v) VALUES (?, 'x')", k.id); err != nil {
					return "", err
				}
			}
			return strings.Repeat("b", k.size), nil
		}
	}
	// answer calls until it gets an answer that is not "busy" or "in
	// progress" (a duplicate of a call that runs, a pool in use).
	answer := func(k *key, fn func(context.Context) (string, error)) (string, error) {
		for {
			v, err := call(ctx, ex, m, k.id, int64(k.size), fn)
			if errors.Is(err, idem.ErrStoreBusy) || errors.Is(err, idem.ErrInProgress) {
				if ctx.Err() != nil {
					return v, fmt.Errorf("not answered in time: %w", err)
				}
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return v, err
		}
	}
	check := func(k *key, v string, err error) {
		t.Helper()
		switch {
		case err == nil && len(v) == k.size:
		case errors.Is(err, idem.ErrOutcomeNotStored) && k.size+2+margin > int(limit):
		default:
			t.Errorf("key of %d bytes: answered (%d bytes, %v)", k.size, len(v), err)
		}
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		for range dups {
			wg.Go(func() {
				v, err := answer(k, method(k))
				check(k, v, err)
			})
		}
	}
	wg.Wait()
	// The retries: replayed, never run again.
	for _, k := range keys {
		v, err := answer(k, method(k))
		check(k, v, err)
		if n := k.runs.Load(); n != 1 {
			t.Errorf("key of %d bytes: the method ran %d times", k.size, n)
		}
		if mode == "tx" {
			if n := rows(t, db, ledger, k.id); n != 1 {
				t.Errorf("key of %d bytes: %d business rows committed", k.size, n)
			}
		}
	}
	var processing int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE status = 1").Scan(&processing))
	if processing != 0 {
		t.Errorf("%d records left PROCESSING", processing)
	}
	var stored int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&stored))
	if stored != len(keys) {
		t.Errorf("%d records stored for %d keys", stored, len(keys))
	}
	// Small outcomes after the refused ones, on the same connections: each
	// answered and stored (its retry runs nothing).
	for range 4 {
		k := &key{id: "small-" + randHex(6), size: 10}
		v, err := answer(k, method(k))
		check(k, v, err)
		v, err = answer(k, method(k))
		check(k, v, err)
		if n := k.runs.Load(); n != 1 {
			t.Errorf("a small call after the refused ones ran %d times", n)
		}
	}
}
