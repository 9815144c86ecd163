package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

// PGStoreTable connects to the test PostgreSQL server (see PostgresDSN)
// with a pool of up to 80 connections and migrates a pgstore table of the
// test's own, named prefix and a random suffix; the table is dropped and
// the pool closed when the test ends.
func PGStoreTable(t testing.TB, prefix string) (*pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 80
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	table := prefix + hex.EncodeToString(b)
	if err := pgstore.New(pool, pgstore.WithTable(table)).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	return pool, table
}

// BreakPGTx is idemtest's Options.BreakTx for pgstore.NewTx and the stores
// built on it: it terminates, from another connection of pool, the backend
// of the transaction ctx carries (pgstore.TxFrom), and waits until it is
// gone.
func BreakPGTx(pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error {
		tx, ok := pgstore.TxFrom(ctx)
		if !ok {
			return errors.New("testenv: no pgstore transaction in the method's context")
		}
		var pid int
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		var done bool
		if err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 30000)", pid).Scan(&done); err != nil {
			return err
		}
		if !done {
			return fmt.Errorf("testenv: backend %d not terminated", pid)
		}
		return nil
	}
}

// PostgresAddr returns the test PostgreSQL server's address (host:port),
// for a proxy in front of it.
func PostgresAddr(t testing.TB) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}

// PGPoolVia returns a pool of at most maxConns connections to the test
// PostgreSQL database that connects through addr (a proxy's host:port);
// it is closed when the test ends.
func PGPoolVia(t testing.TB, addr string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// PGLedger creates a business table of the test's own on pool (dropped
// when the test ends) and returns a method's write of one row for id (in
// the call's pgstore transaction when tx, on pool otherwise) and the count
// of id's committed rows: everystep.Store's Write and Rows.
func PGLedger(t testing.TB, pool *pgxpool.Pool, tx bool) (write func(ctx context.Context, id string) error, rows func(t *testing.T, id string) int) {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	table := pgx.Identifier{"ledger_" + hex.EncodeToString(b)}.Sanitize()
	if _, err := pool.Exec(context.Background(), "CREATE TABLE "+table+" (id text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	insert := "INSERT INTO " + table + " (id) VALUES ($1)"
	write = func(ctx context.Context, id string) error {
		if !tx {
			_, err := pool.Exec(ctx, insert, id)
			return err
		}
		t, ok := pgstore.TxFrom(ctx)
		if !ok {
			return errors.New("testenv: no pgstore transaction in the method's context")
		}
		_, err := t.Exec(ctx, insert, id)
		return err
	}
	rows = func(t *testing.T, id string) int {
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return write, rows
}
