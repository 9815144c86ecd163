package benchcmp

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/benchcmp/orders"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
	"github.com/idemgen/idemgen/runtime/tiered"
)

// Env holds the servers of a run and their round-trip counters.
type Env struct {
	Ctx   context.Context
	Pool  *pgxpool.Pool
	PG    *PGCounter
	Redis *redis.Client
	RR    *RedisCounter
	// MyDB is the MySQL database (nil without a server), MyRT its
	// round-trip counter.
	MyDB    *sql.DB
	MyRT    *MySQLCounter
	myFloor *myFloor
	run     string // unique per process: keeps keys apart from earlier runs
	seq     int    // numbers order sets, so that no two sets share an ID
}

// Tables of the run (pgstore's schema under each name).
const (
	tableLease  = "bench_idem_lease"
	tableTx     = "bench_idem_tx"
	tableTiered = "bench_idem_tiered"
	// tableTieredLease is the durable table of tiered in lease mode.
	tableTieredLease = "bench_idem_tiered_lease"
	tableFloor       = "bench_floor"
)

// NewEnv connects to the servers (either may be empty: those stores are
// skipped) and creates the tables.
func NewEnv(ctx context.Context, dsn, redisAddr string) (*Env, func(), error) {
	return NewEnvMySQL(ctx, dsn, redisAddr, "")
}

// NewEnvMySQL is NewEnv with a MySQL server too (mysqlDSN, a go-sql-driver
// DSN; empty: the mysql store is skipped).
func NewEnvMySQL(ctx context.Context, dsn, redisAddr, mysqlDSN string) (*Env, func(), error) {
	e := &Env{Ctx: ctx, PG: &PGCounter{}, RR: &RedisCounter{}, run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if dsn != "" {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, nil, err
		}
		cfg.MaxConns = 20
		cfg.MinConns = 16
		cfg.ConnConfig.Tracer = e.PG
		if e.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, nil, err
		}
		closers = append(closers, e.Pool.Close)
		for _, t := range []string{tableLease, tableTx, tableTiered, tableTieredLease, tableFloor} {
			if err := pgstore.New(e.Pool, pgstore.WithTable(t)).Migrate(ctx); err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("migrate %s: %w", t, err)
			}
		}
		if _, err := e.Pool.Exec(ctx, orders.Schema); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	if redisAddr != "" {
		// ContextTimeoutEnabled, as runtime/tiered asks of a fast store's
		// client: its calls then end at their context's deadline, so tiered
		// calls Redis on the caller's goroutine (without it, each fast call
		// runs on a goroutine of its own, measured +50 µs per replay here).
		// It changes nothing for a call whose context has no deadline.
		e.Redis = redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 32, MinIdleConns: 16, ContextTimeoutEnabled: true})
		closers = append(closers, func() { _ = e.Redis.Close() })
		if err := e.Redis.Ping(ctx).Err(); err != nil {
			closeAll()
			return nil, nil, err
		}
		e.Redis.AddHook(e.RR)
	}
	if mysqlDSN != "" {
		closeMy, err := e.openMySQL(ctx, mysqlDSN)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("mysql: %w", err)
		}
		closers = append(closers, closeMy)
	}
	return e, closeAll, nil
}

// PGDurability says how durable the PostgreSQL server is, from its own
// settings (fsync, synchronous_commit, full_page_writes), as one sentence
// for the tables.
func (e *Env) PGDurability() string {
	if e.Pool == nil {
		return "No PostgreSQL server."
	}
	var fsync, syncCommit, fpw string
	err := e.Pool.QueryRow(e.Ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('full_page_writes')`).
		Scan(&fsync, &syncCommit, &fpw)
	if err != nil {
		return fmt.Sprintf("PostgreSQL settings unknown (%v).", err)
	}
	kind := "a durable server"
	if fsync != "on" || syncCommit != "on" || fpw != "on" {
		kind = "NOT a durable server: its figures leave out the cost of a commit reaching the disk (make bench sets IDEM_PG_DURABLE=1)"
	}
	return fmt.Sprintf("PostgreSQL: fsync=%s, synchronous_commit=%s, full_page_writes=%s: %s.", fsync, syncCommit, fpw, kind)
}

// reset empties the tables between comparisons, so that every group starts
// on tables of the same size.
func (e *Env) reset() error {
	if err := e.resetMySQL(); err != nil {
		return err
	}
	if e.Pool == nil {
		return nil
	}
	_, err := e.Pool.Exec(e.Ctx, "TRUNCATE "+tableLease+", "+tableTx+", "+tableTiered+", "+tableTieredLease+", "+tableFloor+", bench_orders")
	return err
}

const op = "pay"

// orderSource hands out orders: fresh ones (a new ID per call, built by
// Prepare outside the timing) or a fixed set for replays.
type orderSource struct {
	tag   string
	cell  int
	batch []*orders.Order
}

func newOrder(id string) *orders.Order {
	return &orders.Order{ID: id, Customer: "c-42", Amount: 4250, Currency: "EUR"}
}

func (s *orderSource) prepare(n int) error {
	s.cell++
	s.batch = make([]*orders.Order, n)
	for i := range s.batch {
		s.batch[i] = newOrder(s.tag + "-" + strconv.Itoa(s.cell) + "-" + strconv.Itoa(i))
	}
	return nil
}

func (e *Env) fresh(name string) *orderSource {
	e.seq++
	return &orderSource{tag: e.run + "-" + strconv.Itoa(e.seq) + "-" + name}
}

func (e *Env) fixed(name string, k int) []*orders.Order {
	e.seq++
	os := make([]*orders.Order, k)
	for i := range os {
		os[i] = newOrder(e.run + "-" + strconv.Itoa(e.seq) + "-" + name + "-r" + strconv.Itoa(i))
	}
	return os
}

// framework returns a Variant calling the generated wrapper over ex.
func framework(ctx context.Context, name string, svc *orders.IdempotentService, src *orderSource) Variant {
	return Variant{Name: name, Prepare: src.prepare, Op: func(i int) error {
		r, err := svc.Place(ctx, src.batch[i], op)
		if err == nil && r.OrderID != src.batch[i].ID {
			err = errors.New("wrong receipt")
		}
		return err
	}}
}

func replayFramework(ctx context.Context, name string, svc *orders.IdempotentService, os []*orders.Order) (Variant, error) {
	for _, o := range os {
		if _, err := svc.Place(ctx, o, op); err != nil {
			return Variant{}, err
		}
	}
	return Variant{Name: name, Op: func(i int) error {
		o := os[i%len(os)]
		r, err := svc.Place(ctx, o, op)
		if err == nil && r.OrderID != o.ID {
			err = errors.New("wrong receipt")
		}
		return err
	}}, nil
}

var errDuplicate = errors.New("floor: key already claimed")

// ---- memory -------------------------------------------------------------

// The memory floors that MemoryAims measure the wrapper against.
const (
	MemDirectFloor = "direct call, json.Marshal"
	MemDecodeFloor = "json.Unmarshal"
)

// handMem is the memory floor: one mutex-guarded map, a nil value for a
// claim, the encoded result once complete.
type handMem struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (h *handMem) first(ctx context.Context, svc *orders.Service, o *orders.Order) error {
	key := o.ID + "|" + op
	h.mu.Lock()
	if _, ok := h.m[key]; ok {
		h.mu.Unlock()
		return errDuplicate
	}
	h.m[key] = nil
	h.mu.Unlock()
	r, err := svc.PlaceWith(ctx, nil, o, op)
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.m[key] = b
	h.mu.Unlock()
	return nil
}

func (h *handMem) replay(o *orders.Order) error {
	h.mu.Lock()
	b := h.m[o.ID+"|"+op]
	h.mu.Unlock()
	var r orders.Receipt
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	if r.OrderID != o.ID {
		return errors.New("wrong receipt")
	}
	return nil
}

func (e *Env) memoryGroups(callers int) ([]Group, error) {
	ctx := e.Ctx
	svc := &orders.Service{}
	var wrapped *orders.IdempotentService
	fsrc := e.fresh("mem-fw")
	fw := framework(ctx, "wrapper on memstore", nil, fsrc)
	fw.Prepare = func(n int) error {
		wrapped = orders.NewIdempotentService(svc, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
		return fsrc.prepare(n)
	}
	fw.Op = func(i int) error {
		_, err := wrapped.Place(ctx, fsrc.batch[i], op)
		return err
	}
	hsrc := e.fresh("mem-floor")
	var hm *handMem
	floor := Variant{Name: "map+mutex, direct call, json.Marshal", Prepare: func(n int) error {
		hm = &handMem{m: make(map[string][]byte)}
		return hsrc.prepare(n)
	}, Op: func(i int) error { return hm.first(ctx, svc, hsrc.batch[i]) }}
	dsrc := e.fresh("mem-direct")
	direct := Variant{Name: MemDirectFloor, Prepare: dsrc.prepare, Op: func(i int) error {
		r, err := svc.PlaceWith(ctx, nil, dsrc.batch[i], op)
		if err != nil {
			return err
		}
		_, err = json.Marshal(r)
		return err
	}}
	first := Group{Name: "memory/first", Callers: callers, Variants: []Variant{fw, floor, direct}}

	ros := e.fixed("mem", 256)
	rsvc := orders.NewIdempotentService(svc, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	rfw, err := replayFramework(ctx, "wrapper on memstore", rsvc, ros)
	if err != nil {
		return nil, err
	}
	rhm := &handMem{m: make(map[string][]byte)}
	for _, o := range ros {
		if err := rhm.first(ctx, svc, o); err != nil {
			return nil, err
		}
	}
	rfloor := Variant{Name: "map+mutex lookup, json.Unmarshal", Op: func(i int) error { return rhm.replay(ros[i%len(ros)]) }}
	// The same bodies the wrapper replays (a one-byte string, such as
	// an order ID "x", costs json no allocation, and a real ID one).
	stored := make([][]byte, len(ros))
	for i, o := range ros {
		stored[i] = rhm.m[o.ID+"|"+op]
	}
	decode := Variant{Name: MemDecodeFloor, Op: func(i int) error {
		var r orders.Receipt
		return json.Unmarshal(stored[i%len(stored)], &r)
	}}
	replay := Group{Name: "memory/replay", Callers: callers, Variants: []Variant{rfw, rfloor, decode}}
	return []Group{first, replay}, nil
}

// ---- PostgreSQL floors --------------------------------------------------

var zeroFP [32]byte

// The floors write pgstore's layout 2 (runtime/pgstore/migrations): the
// record keyed by the 32-byte key ID alone, tenant and op as bytea, an
// expiry and a sweep_at instant. The claim stores tenant and op; as in
// pgstore, only the key ID selects the row.
const (
	floorClaimSQL = `INSERT INTO ` + tableFloor + ` (key, tenant, op, fingerprint, status, token, lease_until, expires_at, sweep_at)
VALUES ($3::bytea, convert_to($1::text, 'UTF8'), convert_to($2::text, 'UTF8'), $4::bytea, 1, $5::bigint,
	now() + interval '30 seconds', now() + interval '5 minutes', now() + interval '5 minutes') ON CONFLICT DO NOTHING`
	floorCompleteSQL = `UPDATE ` + tableFloor + ` SET status = 2, body = $3::bytea, lease_until = now(),
	expires_at = now() + interval '5 minutes'
WHERE key = $1::bytea AND token = $2::bigint AND status = 1`
	floorReplaySQL = `SELECT status, body FROM ` + tableFloor + ` WHERE key = $1::bytea AND expires_at > now()`
)

// The lease floor: pgstore's lease-mode first call written by hand as the
// three autocommitted statements of its design (claim, business INSERT,
// complete), each its own round trip and commit. The statements are the
// ones pgstore's lease mode sends (runtime/pgstore/store.go,
// buildStatements), less what a first call never needs: the claim is a plain
// INSERT … ON CONFLICT DO NOTHING (no CTE reading a live record, no
// takeover), the complete is pgstore's fenced UPDATE. They are kept here in
// one place: when pgstore's schema or statements change, change these with
// them, so that the floor keeps doing what pgstore must do.
const (
	leaseFloorLease = 30 * time.Second // orders.Place: lease=30s
	leaseFloorTTL   = 5 * time.Minute  // orders.Place: ttl=5m
	// $1 tenant, $2 op, $3 key, $4 key_text, $5 fingerprint, $6 token,
	// $7 lease and $8 ttl in µs; instants from the database clock.
	leaseFloorClaimSQL = `INSERT INTO ` + tableFloor + ` (key, tenant, op, key_text, fingerprint, scheme, status, token,
	lease_until, created_at, expires_at, sweep_at)
VALUES ($3::bytea, convert_to($1::text, 'UTF8'), convert_to($2::text, 'UTF8'), convert_to($4::text, 'UTF8'), $5::bytea, 0, 1,
	$6::bigint, statement_timestamp() + ($7::bigint * interval '1 microsecond'), statement_timestamp(),
	statement_timestamp() + ($8::bigint * interval '1 microsecond'), statement_timestamp() + ($8::bigint * interval '1 microsecond'))
ON CONFLICT (key) DO NOTHING`
	// $1 the key ID, $2 token, $3 status, $4 body, $5 err_code, $6
	// err_message, $7 meta, $8 ttl in µs. As pgstore's, the complete leaves
	// the indexed sweep_at alone.
	leaseFloorCompleteSQL = `UPDATE ` + tableFloor + ` SET status = $3::smallint, body = $4::bytea,
	err_code = convert_to($5::text, 'UTF8'), err_message = convert_to($6::text, 'UTF8'), meta = $7::bytea,
	lease_until = statement_timestamp(),
	expires_at = statement_timestamp() + ($8::bigint * interval '1 microsecond')
WHERE key = $1::bytea AND token = $2::bigint AND status = 1 AND expires_at > statement_timestamp()`
)

// pgLeaseFloor: claim INSERT, business INSERT, fenced complete UPDATE, each
// autocommitted: three round trips, three commits.
func (e *Env) pgLeaseFloor(ctx context.Context, svc *orders.Service, o *orders.Order) error {
	key, tok := floorKey(o), newToken()
	tag, err := e.Pool.Exec(ctx, leaseFloorClaimSQL, "", floorOp, key, o.ID+"|"+op, zeroFP[:], tok,
		leaseFloorLease.Microseconds(), leaseFloorTTL.Microseconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return errDuplicate
	}
	r, err := svc.PlaceWith(ctx, e.Pool, o, op)
	if err != nil {
		return err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tag, err = e.Pool.Exec(ctx, leaseFloorCompleteSQL, key, tok, int16(idem.StatusSucceeded), body,
		"", "", []byte(nil), leaseFloorTTL.Microseconds())
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return idem.ErrLeaseLost
	}
	return nil
}

// floorOp is the operation name the floors store: the wrapper's, the
// generator's default for orders.(*Service).Place (its package's import
// path, the type and the method), so that both write the same bytes.
const floorOp = "github.com/idemgen/idemgen/internal/benchcmp/orders.Service.Place"

func floorKey(o *orders.Order) []byte {
	k := sha256.Sum256([]byte(o.ID + "|" + op))
	return k[:]
}

func newToken() int64 { return int64(rand.Uint64() >> 1) }

// pgTxFloor: BEGIN, claim INSERT, business INSERT, outcome UPDATE, COMMIT,
// one round trip each.
func (e *Env) pgTxFloor(ctx context.Context, svc *orders.Service, o *orders.Order) error {
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	key, tok := floorKey(o), newToken()
	tag, err := tx.Exec(ctx, floorClaimSQL, "", floorOp, key, zeroFP[:], tok)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return errDuplicate
	}
	r, err := svc.PlaceWith(ctx, tx, o, op)
	if err != nil {
		return err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if tag, err = tx.Exec(ctx, floorCompleteSQL, key, tok, body); err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return idem.ErrLeaseLost
	}
	return tx.Commit(ctx)
}

// pgPipelinedFloor: [BEGIN, claim INSERT], business INSERT, [outcome
// UPDATE, COMMIT]: three round trips.
func (e *Env) pgPipelinedFloor(ctx context.Context, svc *orders.Service, o *orders.Order) (err error) {
	conn, err := e.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
		conn.Release()
	}()
	key, tok := floorKey(o), newToken()
	claimed := false
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(floorClaimSQL, "", floorOp, key, zeroFP[:], tok).Exec(func(ct pgconn.CommandTag) error {
		claimed = ct.RowsAffected() == 1
		return nil
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if !claimed {
		return errDuplicate
	}
	r, err := svc.PlaceWith(ctx, conn, o, op)
	if err != nil {
		return err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	updated := false
	b = &pgx.Batch{}
	b.Queue(floorCompleteSQL, key, tok, body).Exec(func(ct pgconn.CommandTag) error {
		updated = ct.RowsAffected() == 1
		return nil
	})
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if !updated {
		return idem.ErrLeaseLost
	}
	return nil
}

func (e *Env) pgReplayFloor(ctx context.Context, o *orders.Order) error {
	var status int16
	var body []byte
	if err := e.Pool.QueryRow(ctx, floorReplaySQL, floorKey(o)).Scan(&status, &body); err != nil {
		return err
	}
	return floorReplayed(status, body, o)
}

// floorReplayed checks a hand-written replay's row: the stored receipt of
// order o.
func floorReplayed(status int16, body []byte, o *orders.Order) error {
	var r orders.Receipt
	if err := json.Unmarshal(body, &r); err != nil {
		return err
	}
	if status != 2 || r.OrderID != o.ID {
		return errors.New("floor: not a replay")
	}
	return nil
}

func (e *Env) pgCounters() []Counter {
	return []Counter{{Name: "pg", Load: e.PG.Load}}
}

// pgGroups compares pgstore in both modes with its statements written by
// hand: a first call (autocommitted in lease mode, a pipelined and a plain
// transaction in either), a replay, and at one caller a cold replay.
func (e *Env) pgGroups(callers int) ([]Group, error) {
	pipelined := floor{"pipelined tx: [BEGIN+claim] insert [update+COMMIT]", "-pipe", e.pgPipelinedFloor}
	tx := floor{"tx: BEGIN, claim, insert, update, COMMIT", "-tx", e.pgTxFloor}
	return e.sqlGroups(callers, sqlStore{
		svc:      &orders.Service{Pool: e.Pool},
		counters: e.pgCounters,
		modes: []sqlMode{
			{"postgres lease", func() idem.Store { return pgstore.New(e.Pool, pgstore.WithTable(tableLease)) },
				[]floor{{"autocommitted: claim, insert, update", "-auto", e.pgLeaseFloor}, pipelined, tx}},
			{"postgres tx", func() idem.Store { return pgstore.NewTx(e.Pool, pgstore.WithTable(tableTx)) },
				[]floor{pipelined, tx}},
		},
		seed:   e.pgPipelinedFloor,
		replay: e.pgReplayFloor,
		cold:   true,
	})
}

// coldReplay returns a wrapper variant whose replays are of keys its store
// never saw: a retry that reaches another process than its first call, so
// that pgstore's finals hint does not pick its plan (see pgstore.finals).
// The keys are decided by one service of newSvc; the variant replays them
// in turn on another, replaced by a new one before it replays a key again
// (one caller only: Op is not safe for concurrent use).
func (e *Env) coldReplay(ctx context.Context, name string, newSvc func() *orders.IdempotentService) (Variant, error) {
	os := e.fixed(name+"-cold", 256)
	first := newSvc()
	for _, o := range os {
		if _, err := first.Place(ctx, o, op); err != nil {
			return Variant{}, err
		}
	}
	var (
		svc  *orders.IdempotentService
		next int // the key to replay next, whatever the round
	)
	return Variant{Name: "wrapper, on a store that never saw the key", Op: func(int) error {
		if next%len(os) == 0 {
			svc = newSvc()
		}
		o := os[next%len(os)]
		next++
		r, err := svc.Place(ctx, o, op)
		if err == nil && r.OrderID != o.ID {
			err = errors.New("wrong receipt")
		}
		return err
	}}, nil
}

// ---- Redis floors -------------------------------------------------------

// completeLua is the fenced complete of the Redis floor: it replaces the
// claim "P"+token with the outcome only while the claim holds the token.
var completeLua = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
return 0`)

func redisFloorKey(o *orders.Order) string { return "floor:{" + o.ID + "|" + op + "}" }

func claimValue(tok int64) string {
	return "P" + string(binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(tok)))
}

func (e *Env) redisClaim(ctx context.Context, key string, tok int64) error {
	ok, err := e.Redis.SetNX(ctx, key, claimValue(tok), 30*time.Second).Result()
	if err == nil && !ok {
		err = errDuplicate
	}
	return err
}

func (e *Env) redisComplete(ctx context.Context, key string, tok int64, body []byte) error {
	n, err := completeLua.Run(ctx, e.Redis, []string{key}, claimValue(tok), append([]byte("D"), body...), 300000).Int()
	if err == nil && n != 1 {
		err = idem.ErrLeaseLost
	}
	return err
}

// redisFloor: SET NX PX, the business work, a fenced Lua complete.
func (e *Env) redisFloor(ctx context.Context, svc *orders.Service, o *orders.Order) error {
	key, tok := redisFloorKey(o), newToken()
	if err := e.redisClaim(ctx, key, tok); err != nil {
		return err
	}
	r, err := svc.PlaceWith(ctx, nil, o, op)
	if err != nil {
		return err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return e.redisComplete(ctx, key, tok, body)
}

// tieredFloor: SET NX PX in Redis, the pipelined PostgreSQL transaction
// (claim, business INSERT, outcome), then the fenced Lua complete in Redis.
func (e *Env) tieredFloor(ctx context.Context, svc *orders.Service, o *orders.Order) error {
	return e.tieredFloorWith(ctx, o, func() error { return e.pgPipelinedFloor(ctx, svc, o) })
}

// tieredLeaseFloor: SET NX PX in Redis, the three autocommitted PostgreSQL
// statements of lease mode (claim, business INSERT, complete), then the
// fenced Lua complete in Redis.
func (e *Env) tieredLeaseFloor(ctx context.Context, svc *orders.Service, o *orders.Order) error {
	return e.tieredFloorWith(ctx, o, func() error { return e.pgLeaseFloor(ctx, svc, o) })
}

func (e *Env) tieredFloorWith(ctx context.Context, o *orders.Order, durable func() error) error {
	key, tok := redisFloorKey(o), newToken()
	if err := e.redisClaim(ctx, key, tok); err != nil {
		return err
	}
	if err := durable(); err != nil {
		return err
	}
	// The floor encodes the receipt once more for Redis; the framework
	// also hands the same encoded outcome to both tiers.
	body, err := json.Marshal(&orders.Receipt{OrderID: o.ID, Customer: o.Customer, Amount: o.Amount, Currency: o.Currency, Status: "placed"})
	if err != nil {
		return err
	}
	return e.redisComplete(ctx, key, tok, body)
}

func (e *Env) redisReplayFloor(ctx context.Context, o *orders.Order) error {
	b, err := e.Redis.Get(ctx, redisFloorKey(o)).Bytes()
	if err != nil {
		return err
	}
	if len(b) == 0 || b[0] != 'D' {
		return errors.New("floor: not a replay")
	}
	var r orders.Receipt
	if err := json.Unmarshal(b[1:], &r); err != nil {
		return err
	}
	if r.OrderID != o.ID {
		return errors.New("floor: wrong receipt")
	}
	return nil
}

func (e *Env) redisGroups(callers int) ([]Group, error) {
	ctx := e.Ctx
	svc := &orders.Service{}
	counters := []Counter{{Name: "redis", Load: e.RR.Load}}
	wsvc := orders.NewIdempotentService(svc, idem.NewExecutor(redisstore.New(e.Redis, redisstore.WithPrefix("bench:")), idem.SingleTenant()))
	fsrc, bsrc := e.fresh("redis-fw"), e.fresh("redis-floor")
	first := Group{Name: "redis/first", Callers: callers, Counters: counters, Variants: []Variant{
		framework(ctx, "wrapper", wsvc, fsrc),
		{Name: "SET NX PX, fenced Lua complete", Prepare: bsrc.prepare,
			Op: func(i int) error { return e.redisFloor(ctx, svc, bsrc.batch[i]) }},
	}}
	ros := e.fixed("redis", 256)
	rfw, err := replayFramework(ctx, "wrapper", wsvc, ros)
	if err != nil {
		return nil, err
	}
	fos := e.fixed("redisFloor", 256)
	for _, o := range fos {
		if err := e.redisFloor(ctx, svc, o); err != nil {
			return nil, err
		}
	}
	replay := Group{Name: "redis/replay", Callers: callers, Counters: counters, Variants: []Variant{
		rfw,
		{Name: "GET, json.Unmarshal", Op: func(i int) error { return e.redisReplayFloor(ctx, fos[i%len(fos)]) }},
	}}
	return []Group{first, replay}, nil
}

// tieredGroups compares tiered in transactional mode (tiered.NewTx on
// pgstore.NewTx: the claim, the business INSERT and the outcome are one
// PostgreSQL transaction) with the pipelined transaction between the Redis
// claim and complete, tiered in lease mode (tiered.New on pgstore.New) with
// lease mode's three autocommitted statements between them, and replays
// (one Redis round trip in either mode) with GET.
func (e *Env) tieredGroups(callers int) ([]Group, error) {
	ctx := e.Ctx
	svc := &orders.Service{Pool: e.Pool}
	counters := []Counter{{Name: "redis", Load: e.RR.Load}, {Name: "pg", Load: e.PG.Load}}
	st := tiered.NewTx(redisstore.New(e.Redis, redisstore.WithPrefix("bench-t:")), pgstore.NewTx(e.Pool, pgstore.WithTable(tableTiered)))
	wsvc := orders.NewIdempotentService(svc, idem.NewExecutor(st, idem.SingleTenant()))
	lst := tiered.New(redisstore.New(e.Redis, redisstore.WithPrefix("bench-tl:")), pgstore.New(e.Pool, pgstore.WithTable(tableTieredLease)))
	lsvc := orders.NewIdempotentService(svc, idem.NewExecutor(lst, idem.SingleTenant()))
	fsrc, bsrc, lfsrc, lbsrc := e.fresh("tiered-fw"), e.fresh("tiered-floor"), e.fresh("tiered-lease-fw"), e.fresh("tiered-lease-floor")
	first := Group{Name: "tiered/first", Callers: callers, Counters: counters, Variants: []Variant{
		framework(ctx, "wrapper", wsvc, fsrc),
		{Name: "SET NX PX, pipelined pg tx, fenced Lua complete", Prepare: bsrc.prepare,
			Op: func(i int) error { return e.tieredFloor(ctx, svc, bsrc.batch[i]) }},
	}}
	leaseFirst := Group{Name: "tiered lease/first", Callers: callers, Counters: counters, Variants: []Variant{
		framework(ctx, "wrapper", lsvc, lfsrc),
		{Name: "SET NX PX, autocommitted: claim, insert, update, fenced Lua complete", Prepare: lbsrc.prepare,
			Op: func(i int) error { return e.tieredLeaseFloor(ctx, svc, lbsrc.batch[i]) }},
	}}
	ros := e.fixed("tiered", 256)
	rfw, err := replayFramework(ctx, "wrapper", wsvc, ros)
	if err != nil {
		return nil, err
	}
	fos := e.fixed("tieredFloor", 256)
	for _, o := range fos {
		if err := e.tieredFloor(ctx, svc, o); err != nil {
			return nil, err
		}
	}
	replay := Group{Name: "tiered/replay", Callers: callers, Counters: counters, Variants: []Variant{
		rfw,
		{Name: "GET, json.Unmarshal", Op: func(i int) error { return e.redisReplayFloor(ctx, fos[i%len(fos)]) }},
	}}
	return []Group{first, leaseFirst, replay}, nil
}

// Stores lists the stores RuntimeGroups knows, in table order.
var Stores = []string{"memory", "postgres", "redis", "tiered", "mysql"}

// RuntimeGroups builds the comparisons of one store at callers callers.
// They must run in order: each resets the tables it uses first (see
// RunRuntime).
func (e *Env) RuntimeGroups(store string, callers int) ([]Group, error) {
	switch store {
	case "memory":
		return e.memoryGroups(callers)
	case "postgres":
		if e.Pool == nil {
			return nil, nil
		}
		return e.pgGroups(callers)
	case "redis":
		if e.Redis == nil {
			return nil, nil
		}
		return e.redisGroups(callers)
	case "tiered":
		if e.Pool == nil || e.Redis == nil {
			return nil, nil
		}
		return e.tieredGroups(callers)
	case "mysql":
		if e.MyDB == nil {
			return nil, nil
		}
		return e.mysqlGroups(callers)
	}
	return nil, fmt.Errorf("unknown store %q", store)
}

// Reset empties the tables; call it before building a store's groups.
func (e *Env) Reset() error { return e.reset() }
