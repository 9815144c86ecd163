package benchcmp

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/internal/benchcmp/orders"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// MySQLCounter counts MySQL round trips on the network: a read after a
// write on a connection is one (a prepared statement's close, which has no
// reply, is none).
type MySQLCounter struct{ n atomic.Int64 }

// Load returns the count so far.
func (c *MySQLCounter) Load() int64 { return c.n.Load() }

type countingConn struct {
	net.Conn
	c       *MySQLCounter
	mu      sync.Mutex
	written bool
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.written = true
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *countingConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if c.written {
		c.written = false
		c.c.n.Add(1)
	}
	c.mu.Unlock()
	return c.Conn.Read(b)
}

// Tables of the MySQL run (mysqlstore's schema under each name).
const (
	myTableLease = "bench_idem_lease"
	myTableTx    = "bench_idem_tx"
	myTableFloor = "bench_floor"
)

// openMySQL connects to the MySQL server at dsn (a go-sql-driver DSN), with
// a round-trip counter, and creates the tables.
func (e *Env) openMySQL(ctx context.Context, dsn string) (func(), error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	e.MyRT = &MySQLCounter{}
	d := &net.Dialer{KeepAlive: 5 * time.Minute}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, c: e.MyRT}, nil
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	e.MyDB = sql.OpenDB(c)
	e.MyDB.SetMaxOpenConns(40)
	e.MyDB.SetMaxIdleConns(40)
	for _, t := range []string{myTableLease, myTableTx, myTableFloor} {
		if err := mysqlstore.New(e.MyDB, mysqlstore.WithTable(t)).Migrate(ctx); err != nil {
			_ = e.MyDB.Close()
			return nil, fmt.Errorf("migrate %s: %w", t, err)
		}
	}
	if _, err := e.MyDB.ExecContext(ctx, orders.MySQLSchema); err != nil {
		_ = e.MyDB.Close()
		return nil, err
	}
	e.myFloor = &myFloor{db: e.MyDB}
	return func() { e.myFloor.close(); _ = e.MyDB.Close() }, nil
}

// MySQLDurability says how durable the MySQL server is, for the tables.
func (e *Env) MySQLDurability() string {
	if e.MyDB == nil {
		return "No MySQL server."
	}
	var version string
	var flush int
	if err := e.MyDB.QueryRowContext(e.Ctx, "SELECT VERSION(), @@innodb_flush_log_at_trx_commit").Scan(&version, &flush); err != nil {
		return fmt.Sprintf("MySQL settings unknown (%v).", err)
	}
	kind := "a durable server"
	if flush != 1 {
		kind = "NOT a durable server: its figures leave out the cost of a commit reaching the disk (make bench sets IDEM_MYSQL_DURABLE=1)"
	}
	return fmt.Sprintf("MySQL %s: innodb_flush_log_at_trx_commit=%d: %s.", version, flush, kind)
}

func (e *Env) resetMySQL() error {
	if e.MyDB == nil {
		return nil
	}
	for _, t := range []string{myTableLease, myTableTx, myTableFloor, "bench_orders"} {
		if _, err := e.MyDB.ExecContext(e.Ctx, "TRUNCATE TABLE "+t); err != nil {
			return err
		}
	}
	return nil
}

// The MySQL floors: mysqlstore's statements for a first call and a replay
// written by hand with the same driver, prepared once per connection as
// mysqlstore prepares them (the business INSERT is the service's own, the
// same call on both sides) (the server's clock in µs, the key's SHA-256 as
// the primary key). When mysqlstore's schema or statements change, change
// these with them.
const (
	myNow              = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
	myFloorClaimSQL    = `INSERT INTO ` + myTableFloor + ` (idem_key, token, lease_until, expires_at, created_at, scheme, status, fingerprint, tenant, op, key_text) VALUES (?, ?, ` + myNow + ` + ?, ` + myNow + ` + ?, ` + myNow + `, 0, 1, ?, ?, ?, ?)`
	myFloorCompleteSQL = `UPDATE ` + myTableFloor + ` SET status = 2, body = ?, lease_until = ` + myNow + `, expires_at = ` + myNow + ` + ? WHERE idem_key = ? AND token = ? AND status = 1`
	myFloorReplaySQL   = `SELECT status, body FROM ` + myTableFloor + ` WHERE idem_key = ? AND expires_at > ` + myNow
)

type myFloor struct {
	db                      *sql.DB
	once                    sync.Once
	err                     error
	claim, complete, replay *sql.Stmt
}

func (f *myFloor) prepare(ctx context.Context) error {
	f.once.Do(func() {
		for _, p := range []struct {
			st **sql.Stmt
			q  string
		}{{&f.claim, myFloorClaimSQL}, {&f.complete, myFloorCompleteSQL}, {&f.replay, myFloorReplaySQL}} {
			if *p.st, f.err = f.db.PrepareContext(ctx, p.q); f.err != nil {
				return
			}
		}
	})
	return f.err
}

func (f *myFloor) close() {
	for _, st := range []*sql.Stmt{f.claim, f.complete, f.replay} {
		if st != nil {
			_ = st.Close()
		}
	}
}

func one(res sql.Result, err error, none error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return none
	}
	return nil
}

// myLeaseFloor: claim INSERT, business INSERT, fenced complete UPDATE, each
// autocommitted: three round trips, three commits.
func (e *Env) myLeaseFloor(ctx context.Context, svc *orders.Service, o *orders.Order) error {
	f := e.myFloor
	if err := f.prepare(ctx); err != nil {
		return err
	}
	key, tok := floorKey(o), newToken()
	res, err := f.claim.ExecContext(ctx, key, tok, leaseFloorLease.Microseconds(), leaseFloorTTL.Microseconds(),
		zeroFP[:], []byte{}, []byte(floorOp), []byte(o.ID+"|"+op))
	if err := one(res, err, errDuplicate); err != nil {
		return err
	}
	r, err := svc.PlaceSQL(ctx, e.MyDB, o, op)
	if err != nil {
		return err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	res, err = f.complete.ExecContext(ctx, body, leaseFloorTTL.Microseconds(), key, tok)
	return one(res, err, idem.ErrLeaseLost)
}

// myTxFloor: BEGIN, claim INSERT, business INSERT, outcome UPDATE, COMMIT,
// one round trip each.
func (e *Env) myTxFloor(ctx context.Context, svc *orders.Service, o *orders.Order) error {
	f := e.myFloor
	if err := f.prepare(ctx); err != nil {
		return err
	}
	tx, err := e.MyDB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	key, tok := floorKey(o), newToken()
	res, err := tx.StmtContext(ctx, f.claim).ExecContext(ctx, key, tok, leaseFloorLease.Microseconds(), leaseFloorTTL.Microseconds(),
		zeroFP[:], []byte{}, []byte(floorOp), []byte(o.ID+"|"+op))
	if err := one(res, err, errDuplicate); err != nil {
		return err
	}
	r, err := svc.PlaceSQL(ctx, tx, o, op)
	if err != nil {
		return err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	res, err = tx.StmtContext(ctx, f.complete).ExecContext(ctx, body, leaseFloorTTL.Microseconds(), key, tok)
	if err := one(res, err, idem.ErrLeaseLost); err != nil {
		return err
	}
	return tx.Commit()
}

func (e *Env) myReplayFloor(ctx context.Context, o *orders.Order) error {
	f := e.myFloor
	if err := f.prepare(ctx); err != nil {
		return err
	}
	var status int16
	var body []byte
	if err := f.replay.QueryRowContext(ctx, floorKey(o)).Scan(&status, &body); err != nil {
		return err
	}
	return floorReplayed(status, body, o)
}

func (e *Env) myCounters() []Counter {
	return []Counter{{Name: "mysql", Load: e.MyRT.Load}}
}

// mysqlGroups compares mysqlstore in both modes with its statements written
// by hand: a first call and a replay.
func (e *Env) mysqlGroups(callers int) ([]Group, error) {
	return e.sqlGroups(callers, sqlStore{
		svc:      &orders.Service{DB: e.MyDB},
		counters: e.myCounters,
		modes: []sqlMode{
			{"mysql lease", func() idem.Store { return mysqlstore.New(e.MyDB, mysqlstore.WithTable(myTableLease)) },
				[]floor{{"autocommitted: claim, insert, update", "-hand", e.myLeaseFloor}}},
			{"mysql tx", func() idem.Store { return mysqlstore.NewTx(e.MyDB, mysqlstore.WithTable(myTableTx)) },
				[]floor{{"tx: BEGIN, claim, insert, update, COMMIT", "-hand", e.myTxFloor}}},
		},
		seed:   e.myLeaseFloor,
		replay: e.myReplayFloor,
	})
}
