// Package mysqlstress adds the MySQL backends of the stress harness:
// mysqlstore in lease mode, and mysqlstore in transactional mode with a
// business table written through the call's transaction. Every opened
// store works in a database of its own (created on open, dropped on close),
// so that a fault injector can kill this run's sessions and no one else's.
package mysqlstress

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// MySQL is mysqlstore in lease mode on the server at dsn.
func MySQL(dsn string) stress.Backend {
	return stress.Backend{Name: "mysql", Open: func(ctx context.Context, srv stress.Servers) (*stress.Handle, error) {
		o, err := open(ctx, pick(srv.MySQLDSN, dsn), 16)
		if err != nil {
			return nil, err
		}
		s := mysqlstore.New(o.db)
		if err := s.Migrate(ctx); err != nil {
			o.close()
			return nil, fmt.Errorf("mysql: migrate: %w", err)
		}
		return &stress.Handle{Store: s, Sweep: s.Sweep, Terminate: o.terminate, Close: func() { _ = s.Close(); o.close() }}, nil
	}}
}

// MySQLTx is mysqlstore in transactional mode (mysqlstore.NewTx): Pay's
// body writes a row of idem_stress_payments through the call's transaction
// (mysqlstore.TxFrom), and executions are counted from the committed rows.
func MySQLTx(dsn string) stress.Backend {
	return stress.Backend{Name: "mysql-tx", Open: func(ctx context.Context, srv stress.Servers) (*stress.Handle, error) {
		o, err := open(ctx, pick(srv.MySQLDSN, dsn), 48)
		if err != nil {
			return nil, err
		}
		s := mysqlstore.NewTx(o.db)
		if err := s.Migrate(ctx); err != nil {
			o.close()
			return nil, fmt.Errorf("mysql: migrate: %w", err)
		}
		if _, err := o.db.ExecContext(ctx, paymentsSchema); err != nil {
			o.close()
			return nil, fmt.Errorf("mysql: business table: %w", err)
		}
		return &stress.Handle{Store: s, Sweep: s.Sweep, Tx: true, Business: &payments{db: o.db}, Terminate: o.terminate,
			Close: func() { _ = s.Close(); o.close() }}, nil
	}}
}

func pick(override, def string) string {
	if override != "" {
		return override
	}
	return def
}

// opened is a database of the run's own on the server.
type opened struct {
	db, admin *sql.DB
	name      string
	mu        sync.Mutex
	seen      map[int64]bool
}

// open creates a database of its own on the server at dsn and returns a
// *sql.DB on it with at most conns connections.
func open(ctx context.Context, dsn string, conns int) (*opened, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	cfg.MaxAllowedPacket = 0
	cfg.Logger = &mysql.NopLogger{} // killed connections are the point of some scenarios
	admin, err := connect(cfg, 2)
	if err != nil {
		return nil, err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "idem_stress_" + hex.EncodeToString(rnd[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close()
		return nil, fmt.Errorf("mysql: create database: %w", err)
	}
	cfg = cfg.Clone()
	cfg.DBName = name
	db, err := connect(cfg, conns)
	if err != nil {
		_ = admin.Close()
		return nil, err
	}
	return &opened{db: db, admin: admin, name: name, seen: map[int64]bool{}}, nil
}

func connect(cfg *mysql.Config, conns int) (*sql.DB, error) {
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db, nil
}

func (o *opened) close() {
	_ = o.db.Close()
	_, _ = o.admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+o.name)
	_ = o.admin.Close()
}

// terminate kills up to n of the run's sessions (those on its database)
// that are inside a transaction (first) or running a statement, from the admin connection (on no
// database: it never kills itself), and returns how many it killed.
func (o *opened) terminate(ctx context.Context, n int) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rows, err := o.admin.QueryContext(ctx, `SELECT p.ID FROM information_schema.PROCESSLIST p
	LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID
	WHERE p.DB = ? AND (t.trx_id IS NOT NULL OR p.COMMAND IN ('Query', 'Execute'))
	ORDER BY t.trx_id IS NULL, RAND() LIMIT ?`, o.name, n+len(o.seen))
	if err != nil {
		return 0, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return 0, err
		}
		if !o.seen[id] && len(ids) < n {
			ids = append(ids, id)
		}
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	killed := 0
	for _, id := range ids {
		o.seen[id] = true
		// A session that ended meanwhile is "unknown thread": not an error.
		if _, err := o.admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
			killed++
		}
	}
	return killed, nil
}

const paymentsSchema = `CREATE TABLE IF NOT EXISTS idem_stress_payments (
	id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	tenant VARBINARY(255) NOT NULL,
	order_id VARBINARY(255) NOT NULL,
	payment_id VARBINARY(255) NOT NULL,
	KEY idem_stress_payments_tenant (tenant, order_id)
) ENGINE = InnoDB`

// payments is the business table of the transactional backend.
type payments struct {
	db *sql.DB
}

// Debit implements stress.Business: one row, through the call's transaction.
func (p *payments) Debit(ctx context.Context, tenant, order, paymentID string) error {
	tx, ok := mysqlstore.TxFrom(ctx)
	if !ok {
		return fmt.Errorf("no idempotency transaction in the method's context")
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO idem_stress_payments (tenant, order_id, payment_id) VALUES (?, ?, ?)",
		tenant, order, paymentID)
	return err
}

// Committed implements stress.Business.
func (p *payments) Committed(ctx context.Context, tenant string) (map[string]int, error) {
	rows, err := p.db.QueryContext(ctx, "SELECT order_id, COUNT(*) FROM idem_stress_payments WHERE tenant = ? GROUP BY order_id", tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var order string
		var n int
		if err := rows.Scan(&order, &n); err != nil {
			return nil, err
		}
		m[order] = n
	}
	return m, rows.Err()
}
