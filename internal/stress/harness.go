package stress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/examples/orders/billing"
	"github.com/idemgen/idemgen/runtime/idem"
)

// Backend is a store the storm runs on.
type Backend struct {
	Name string
	// Open returns a store for one scenario run, on the servers of srv where
	// they are set (a scenario's own servers), else on the backend's own.
	Open func(ctx context.Context, srv Servers) (*Handle, error)
}

// Servers overrides the servers a backend opens its store on: a fault
// scenario that kills or restarts a server runs on one the harness started.
type Servers struct {
	RedisAddr string // "" keeps the backend's
	PGDSN     string // "" keeps the backend's
	// RedisClusterAddrs are the nodes of a Redis Cluster; nil keeps the
	// backend's.
	RedisClusterAddrs []string
}

// Handle is one opened store.
type Handle struct {
	Store idem.Store
	// Sweep deletes up to batch expired records; nil when the store expires
	// records by itself (Redis).
	Sweep func(ctx context.Context, batch int) (int, error)
	// Close releases the store's resources; may be nil.
	Close func()
	// StaleReplay: the store may replay an expired final record for up to
	// one more TTL (tiered, from its fast tier); the model allows it.
	StaleReplay bool
	// MayLose: the store may forget an acknowledged record (plain Redis: a
	// restart without persistence, a failover, an eviction), its documented
	// limit. When a scenario loses records, the model lets any record
	// vanish, a free key after a successful call is not a failure, and a
	// key executes once more per loss; those executions are reported as
	// the documented limit.
	MayLose bool
	// Lose deletes key's record where the store keeps it in Redis (plain
	// Redis: the record; tiered: its fast tier), as a failover to a replica
	// that had not received it would; nil when the store has no Redis.
	Lose func(ctx context.Context, key idem.Key) error
	// Tx: the store is an idem.TxStore (pgstore.NewTx): the claim, the
	// method's writes and the outcome commit together; executions are
	// counted from Business.
	Tx bool
	// Business, in transactional mode, is the business table Pay's body
	// writes through the call's transaction (pgstore.TxFrom): only committed
	// writes count as executions.
	Business Business
	// Terminate ends up to n of the store's own database sessions that are
	// inside a transaction (pg_terminate_backend, only sessions whose
	// application_name is the store's own) and returns how many it ended.
	Terminate func(ctx context.Context, n int) (int, error)
}

// Business is a business table written inside the idempotent call's
// transaction.
type Business interface {
	// Debit records one payment of order, through the call's transaction
	// (ctx is the method's).
	Debit(ctx context.Context, tenant, order, paymentID string) error
	// Committed returns the committed payments per order of tenant.
	Committed(ctx context.Context, tenant string) (map[string]int, error)
}

// Scenario is one storm with its faults. Adding a scenario is one function
// that fills in a Storm (see scenarios.go).
type Scenario struct {
	Name  string
	About string
	// Applies reports whether the scenario runs on the named backend; nil
	// means every backend.
	Applies func(backend string) bool
	// Configure shapes the storm: counts, fractions, faults, background
	// injectors. It starts from DefaultStorm(short).
	Configure func(s *Storm)
	// OwnRedis, OwnPG: the scenario kills or restarts that server, so it
	// runs on one the harness started (Options.Redis, Options.PG, or one
	// started for the run), never on a server it did not start.
	OwnRedis, OwnPG bool
	// OwnCluster: the scenario kills a node of, or moves slots in, the
	// Redis Cluster, so it runs on one the harness starts for the run.
	OwnCluster bool
}

// Storm is the shape of one run.
type Storm struct {
	// Short is set for the shortened run inside go test.
	Short bool

	Calls   int // calls of Pay
	Keys    int // orders (keys of Pay)
	Workers int
	// Burst is how many copies of a key are issued back to back, so that
	// they run concurrently; a key's Calls/Keys copies come in several
	// bursts at random points of the run.
	Burst int

	// Conflict is the fraction of Pay calls sent with another amount under
	// the same key (they must get ErrPayloadMismatch or win the key).
	Conflict float64
	// Transient is the fraction of gateway calls that fail with
	// ErrGatewayTimeout (the key is released; a retry executes again).
	Transient float64
	// Poor is the number of keys whose customer cannot pay: their outcome is
	// the final error ErrInsufficientFunds, stored and replayed.
	Poor int

	// Stalled keys: the first worker to run the key stalls for StallFor
	// (default 3×StallLease), past its lease of StallLease (default 300ms;
	// the store sees it through the Tweak decorator), while the key's other copies wait, take it
	// over and finish. StallFinal: the stall is in the gateway, before the
	// side effect, and ends with a final error: the zombie's Complete must
	// get ErrLeaseLost. StallTransient: before the side effect, ending with a
	// transient error: the zombie's Release is fenced. StallAfter: after the
	// side effect (the documented limit of lease mode: it executes twice).
	StallFinal, StallTransient, StallAfter int
	StallLease, StallFor                   time.Duration

	// Shipments is the number of HandleShipment calls over ShipmentKeys
	// messages whose records live ShipmentTTL (lease: half of it): records
	// that expire while the storm runs. Executions of those are reported, not
	// bounded: an expired record behaves as absent (and a lease that short
	// may lapse within a store round trip: ErrLeaseLost is documented for
	// them).
	Shipments, ShipmentKeys int
	ShipmentTTL             time.Duration
	// Sweep, when > 0, runs the store's Sweep every Sweep during the storm.
	Sweep time.Duration

	// StoreFaults documents store errors (fault scenarios): calls may fail
	// with a store error (or, in transactional mode, a failed business
	// write), and a claim left behind by a failed store call may be taken
	// over by the post-run probe, for keys whose calls saw a store error.
	StoreFaults bool
	// ErrorPause is how long a worker backs off after a call failed with a
	// store error, as a client retrying after a 503 would (so that an outage
	// does not burn the whole plan in a moment).
	ErrorPause time.Duration
	// Background functions run during the storm (fault injectors); they must
	// return when ctx is done.
	Background []func(ctx context.Context, env *Env) error
	// Faults is how many Background injectors call Env.FaultDone once their
	// fault is over (the server is back); HoldAt, when > 0, is the fraction
	// of the calls after which the storm waits for them, so that the rest
	// of the calls run against a recovered server.
	Faults int
	HoldAt float64
	// AfterEffect is how long Pay's body takes after its side effect (in
	// transactional mode: after the business write, before the commit).
	AfterEffect time.Duration

	CallTimeout  time.Duration
	CheckTimeout time.Duration
}

// DefaultStorm is the plain storm: 10,000 calls over 100 keys, 32 workers
// (2,000 calls over 50 keys, 16 workers when short).
func DefaultStorm(short bool) Storm {
	s := Storm{
		Short: short, Calls: 10000, Keys: 100, Workers: 32, Burst: 8,
		Conflict: 0.01, Transient: 0.1, Poor: 5,
		StallLease:  300 * time.Millisecond,
		CallTimeout: 30 * time.Second, CheckTimeout: 60 * time.Second,
	}
	if short {
		// The check keeps the full run's 60s: a short history is checked
		// in well under a second, but under -race on a loaded 2-core
		// machine one key full of store errors has taken over 20s.
		s.Calls, s.Keys, s.Workers, s.Poor = 2000, 50, 16, 3
	}
	return s
}

// Options are a run's settings that are not the storm's shape.
type Options struct {
	Short bool
	// VizDir, when set, receives the porcupine visualization of an
	// illegal history.
	VizDir string
	Seed   uint64
	// Calls, Keys and Workers, when > 0, replace the storm's defaults
	// (before the scenario's Configure).
	Calls, Keys, Workers int
	// Redis and PG, when set, are servers of the harness's own that
	// scenarios with OwnRedis / OwnPG use (and may kill or restart);
	// otherwise such a scenario starts one for its run.
	Redis *RedisServer
	PG    *PGServer
}

// Env is what a background fault injector gets.
type Env struct {
	Backend  string
	Handle   *Handle
	Recorder *Recorder
	Ledger   *Ledger
	Tenant   string
	Seed     uint64
	Short    bool
	// Redis and PG are the scenario's own servers (OwnRedis, OwnPG).
	Redis *RedisServer
	PG    *PGServer
	// Cluster is the scenario's own Redis Cluster (OwnCluster).
	Cluster *ClusterServer

	total     int
	start     atomic.Pointer[time.Time]
	issued    atomic.Int64
	faults    sync.WaitGroup
	completed chan idem.Key

	mu      sync.Mutex
	losses  map[string]int // per key text
	lostAll int
	notes   []string
}

// WaitProgress returns once the storm has issued frac of its calls, or ctx
// is done.
func (e *Env) WaitProgress(ctx context.Context, frac float64) error {
	want := int64(frac * float64(e.total))
	for e.issued.Load() < want {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// Elapsed is the time since the storm started.
func (e *Env) Elapsed() time.Duration {
	if t := e.start.Load(); t != nil {
		return time.Since(*t).Round(time.Millisecond)
	}
	return 0
}

// FaultDone tells the storm that one fault is over (see Storm.Faults).
func (e *Env) FaultDone() { e.faults.Done() }

// Issued is how many calls the storm has issued so far.
func (e *Env) Issued() int { return int(e.issued.Load()) }

// Completed delivers the keys of outcomes the store acknowledged, as they
// are stored (best effort: some are dropped if nobody reads).
func (e *Env) Completed() <-chan idem.Key { return e.completed }

// Lose deletes key's record in the store's Redis (Handle.Lose) and counts
// the loss.
func (e *Env) Lose(ctx context.Context, key idem.Key) error {
	if e.Handle.Lose == nil {
		return fmt.Errorf("store %s keeps nothing in Redis", e.Backend)
	}
	e.mu.Lock()
	e.losses[key.Text]++
	e.mu.Unlock()
	return e.Handle.Lose(ctx, key)
}

// LostAll counts the loss of every record at once (a Redis restart without
// persistence).
func (e *Env) LostAll() {
	e.mu.Lock()
	e.lostAll++
	e.mu.Unlock()
}

// Note adds a remark to the run's summary line (what a fault did).
func (e *Env) Note(format string, args ...any) {
	e.mu.Lock()
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

func (e *Env) lossesOf(text string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.losses[text] + e.lostAll
}

func (e *Env) lostAny() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lostAll > 0 || len(e.losses) > 0
}

type keyClass uint8

const (
	classNormal keyClass = iota
	classPoor
	classStallFinal
	classStallTransient
	classStallAfter
)

func (c keyClass) stalls() bool { return c >= classStallFinal }

type callKind uint8

const (
	callPay callKind = iota
	callShip
)

type plannedCall struct {
	kind     callKind
	key      int
	conflict bool
}

type callResult struct {
	receipt *billing.Receipt
	err     error
	at, dur time.Duration // start, from the storm's start; duration
}

// Result is the outcome of one scenario on one backend.
type Result struct {
	Scenario, Store string
	Calls, Keys     int
	ExecMin         int
	ExecMax         int
	// DocumentedDup counts executions beyond the first where a store's or
	// a scenario's documented limit allows them; Documented splits them by
	// limit: "stall-after-effect" (lease mode), "complete-store-error" (the
	// executor's observer reported a store_error for the key's Complete: a
	// retry after the lease runs again), "lost-record" (plain Redis forgot
	// the record).
	DocumentedDup int
	Documented    map[string]int
	// RolledBack counts executions of Pay's body whose transaction rolled
	// back (transactional mode): they do not count as executions.
	RolledBack int
	// Notes say what the scenario's faults did.
	Notes   []string
	Kinds   map[string]int // caller-visible outcomes by kind
	Events  map[string]int // executor events
	Swept   int
	Elapsed time.Duration
	// ErrFrom and ErrTo bound the calls that failed with a store error
	// (kind "store" or "db"), from the storm's start: the first one's start
	// and the last one's end; both 0 when none failed.
	ErrFrom, ErrTo time.Duration
	P50, P99       time.Duration

	ShipCalls, ShipKeys, ShipExecMin, ShipExecMax int
	Probe                                         ProbeStats
	Check                                         CheckResult

	Failures []string
}

// ProbeStats is what the post-run probe found.
type ProbeStats struct {
	Final, Free, Leaked, Stuck int
}

// OK reports whether every assertion held.
func (r *Result) OK() bool { return len(r.Failures) == 0 }

var kindOrder = []string{"ok", "final", "mismatch", "in_progress", "transient", "lease_lost", "store", "db", "timeout", "other"}

// Line is the one-line summary of the run.
func (r *Result) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-18s %-7s calls=%d keys=%d exec/key=%d..%d", r.Scenario, r.Store, r.Calls, r.Keys, r.ExecMin, r.ExecMax)
	if r.DocumentedDup > 0 {
		fmt.Fprintf(&b, " (documented dup=%d:", r.DocumentedDup)
		for _, k := range []string{"stall-after-effect", "complete-store-error", "lost-record"} {
			if n := r.Documented[k]; n > 0 {
				fmt.Fprintf(&b, " %s=%d", k, n)
			}
		}
		b.WriteString(")")
	}
	if r.RolledBack > 0 {
		fmt.Fprintf(&b, " rolled-back=%d", r.RolledBack)
	}
	b.WriteString(" |")
	for _, k := range kindOrder {
		if n := r.Kinds[k]; n > 0 || k == "ok" {
			fmt.Fprintf(&b, " %s=%d", k, n)
		}
	}
	b.WriteString(" |")
	for _, k := range []string{"taken_over", "lease_lost", "store_error"} {
		fmt.Fprintf(&b, " %s=%d", k, r.Events[k])
	}
	if r.ShipCalls > 0 {
		fmt.Fprintf(&b, " | expiring: calls=%d keys=%d exec/key=%d..%d swept=%d", r.ShipCalls, r.ShipKeys, r.ShipExecMin, r.ShipExecMax, r.Swept)
	}
	secs := r.Elapsed.Seconds()
	total := r.Calls + r.ShipCalls
	fmt.Fprintf(&b, " | %.0f calls/s p50=%v p99=%v", float64(total)/max(secs, 1e-9), round(r.P50), round(r.P99))
	fmt.Fprintf(&b, " | probe final=%d free=%d leaked=%d stuck=%d", r.Probe.Final, r.Probe.Free, r.Probe.Leaked, r.Probe.Stuck)
	fmt.Fprintf(&b, " | history %d ops/%d keys: %s", r.Check.Ops, r.Check.Keys, verdict(r.Check.Result))
	if r.Check.MayLose {
		b.WriteString(" (records may vanish: documented)")
	}
	if r.ErrTo > 0 {
		fmt.Fprintf(&b, " | store errors from %v to %v (%v)", round(r.ErrFrom), round(r.ErrTo), round(r.ErrTo-r.ErrFrom))
	}
	for _, n := range r.Notes {
		b.WriteString(" | " + n)
	}
	if r.OK() {
		b.WriteString(" | PASS")
	} else {
		fmt.Fprintf(&b, " | FAIL (%d)", len(r.Failures))
	}
	return b.String()
}

func verdict(c porcupine.CheckResult) string {
	switch c {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "NOT LINEARIZABLE"
	case porcupine.Unknown:
		return "check timed out"
	}
	return "not checked"
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d
}

func (r *Result) failf(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// Classify names the kind of a caller-visible outcome.
func Classify(err error) string {
	var se *StoreError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, idem.ErrLeaseLost):
		return "lease_lost"
	case errors.As(err, &se):
		return "store"
	case errors.As(err, new(*DBError)):
		return "db"
	case errors.Is(err, idem.ErrInProgress):
		return "in_progress"
	case errors.Is(err, idem.ErrPayloadMismatch):
		return "mismatch"
	case errors.Is(err, billing.ErrInsufficientFunds), errors.Is(err, billing.ErrOrderClosed):
		return "final"
	case errors.Is(err, billing.ErrGatewayTimeout):
		return "transient"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "other"
}

func orderID(i int) string    { return fmt.Sprintf("o%03d", i) }
func customerID(i int) string { return fmt.Sprintf("c%03d", i) }
func amount(i int) int64      { return 100 + int64(i) }
func messageID(i int) string  { return fmt.Sprintf("m%03d", i) }
func shipOrder(i int) string  { return fmt.Sprintf("s%03d", i) }

// payKey and payFingerprint derive Pay's key and fingerprint the way the
// generated wrapper does (the run checks that the history agrees).
func payKey(tenant string, i int) (idem.Key, idem.Fingerprint) {
	var k idem.KeyParts
	k.String("order.ID", orderID(i))
	k.String("op", "pay")
	key, _ := k.Key(tenant, "Service.Pay")
	var h idem.Hasher
	h.Value(&billing.Order{ID: orderID(i), Customer: customerID(i), Amount: amount(i)})
	h.String("pay")
	fp, _ := h.Sum()
	return key, fp
}

func shipKey(tenant string, i int) (idem.Key, idem.Fingerprint) {
	var k idem.KeyParts
	k.String("msg.ID", messageID(i))
	key, _ := k.Key(tenant, "Service.HandleShipment")
	var h idem.Hasher
	h.Value(shipment(i))
	fp, _ := h.Sum()
	return key, fp
}

func shipment(i int) billing.ShipmentMessage {
	return billing.ShipmentMessage{ID: billing.MessageID(messageID(i)), OrderID: shipOrder(i), Points: 1}
}

// Run runs scenario sc on backend b.
func Run(ctx context.Context, sc Scenario, b Backend, opt Options) (*Result, error) {
	st := DefaultStorm(opt.Short)
	if opt.Calls > 0 {
		st.Calls = opt.Calls
	}
	if opt.Keys > 0 {
		st.Keys = opt.Keys
	}
	if opt.Workers > 0 {
		st.Workers = opt.Workers
	}
	if sc.Configure != nil {
		sc.Configure(&st)
	}
	var srv Servers
	redisSrv, pgSrv := opt.Redis, opt.PG
	if sc.OwnRedis {
		if redisSrv == nil {
			s, err := StartRedis(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", sc.Name, err)
			}
			defer s.Stop()
			redisSrv = s
		}
		srv.RedisAddr = redisSrv.Addr()
	}
	if sc.OwnPG {
		if pgSrv == nil {
			s, err := StartPG(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", sc.Name, err)
			}
			defer s.Stop()
			pgSrv = s
		}
		srv.PGDSN = pgSrv.DSN
	}
	var cluster *ClusterServer
	if sc.OwnCluster {
		s, err := StartCluster(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.Name, err)
		}
		defer s.Stop()
		cluster = s
		srv.RedisClusterAddrs = s.Addrs()
	}
	h, err := b.Open(ctx, srv)
	if err != nil {
		return nil, fmt.Errorf("%s: open store: %w", b.Name, err)
	}
	if h.Close != nil {
		defer h.Close()
	}
	seed := opt.Seed
	if seed == 0 {
		seed = mrand.Uint64()
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tenant := "stress-" + sc.Name + "-" + hex.EncodeToString(rnd[:])

	// Key classes: stalled keys first, then poor ones, then normal ones.
	classes := make([]keyClass, st.Keys)
	i := 0
	for _, c := range []struct {
		n int
		c keyClass
	}{{st.StallFinal, classStallFinal}, {st.StallTransient, classStallTransient}, {st.StallAfter, classStallAfter}, {st.Poor, classPoor}} {
		for range c.n {
			if i < st.Keys {
				classes[i] = c.c
				i++
			}
		}
	}
	classOf := map[string]keyClass{}
	balances := map[string]int64{}
	for k := range st.Keys {
		classOf[orderID(k)] = classes[k]
		balances[customerID(k)] = 1 << 50
		if classes[k] == classPoor {
			balances[customerID(k)] = 0
		}
	}

	ledger := NewLedger(balances)
	stallFor := st.StallFor
	if stallFor == 0 {
		stallFor = 3 * st.StallLease
	}
	stallKeys := map[string]bool{}
	for k := range st.Keys {
		if classes[k].stalls() {
			stallKeys[orderID(k)+"+pay"] = true
		}
	}
	// Random transient failures spare stalled keys, so that their
	// assertions are exact.
	gw := &Gateway{Hook: func(order string, n int) (time.Duration, error) {
		c := classOf[order]
		switch {
		case c == classStallFinal && n == 1:
			return stallFor, billing.ErrOrderClosed
		case c == classStallTransient && n == 1:
			return stallFor, billing.ErrGatewayTimeout
		case c.stalls():
			return 0, nil
		case st.Transient > 0 && frac(seed, order, n) < st.Transient:
			return 0, billing.ErrGatewayTimeout
		}
		return 0, nil
	}}
	if h.Business != nil {
		ledger.Write = func(ctx context.Context, order, paymentID string) error {
			return h.Business.Debit(ctx, tenant, order, paymentID)
		}
	}
	ledger.After = func(order string, n int) {
		if classOf[order] == classStallAfter && n == 1 {
			time.Sleep(stallFor)
		} else if st.AfterEffect > 0 {
			time.Sleep(st.AfterEffect)
		}
	}

	rec, recStore := recordStore(h.Store)
	tweak := tweakStore(recStore, func(k idem.Key) (time.Duration, time.Duration, bool) {
		switch {
		case k.Op == "Service.Pay" && stallKeys[k.Text]:
			return st.StallLease, 0, true
		case k.Op == "Service.HandleShipment" && st.ShipmentTTL > 0:
			return st.ShipmentTTL / 2, st.ShipmentTTL, true
		}
		return 0, 0, false
	})
	var evMu sync.Mutex
	events := map[string]int{}
	keyEvents := map[string]map[string]int{}
	completeErrs := map[string]int{}
	ex := idem.NewExecutor(tweak,
		idem.WithTenant(func(context.Context) string { return tenant }),
		idem.WithObserver(func(ev idem.Event) {
			evMu.Lock()
			events[ev.Kind.String()]++
			m := keyEvents[ev.Key.Text]
			if m == nil {
				m = map[string]int{}
				keyEvents[ev.Key.Text] = m
			}
			m[ev.Kind.String()]++
			var se *StoreError
			if ev.Kind == idem.EventStoreError && errors.As(ev.Err, &se) && se.Op == "complete" {
				completeErrs[ev.Key.Text]++
			}
			evMu.Unlock()
		}))
	svc := billing.NewIdempotentService(&billing.Service{Ledger: ledger, Gateway: gw}, ex)

	// The plan: each key's copies in bursts, bursts in random order.
	rng := mrand.New(mrand.NewPCG(seed, 0x57e55))
	var bursts [][]plannedCall
	addBursts := func(kind callKind, keys, calls int, conflict float64) {
		if keys == 0 {
			return
		}
		per := calls / keys
		for k := range keys {
			n := per
			if k < calls%keys {
				n++
			}
			for n > 0 {
				m := min(n, st.Burst)
				burst := make([]plannedCall, m)
				for j := range burst {
					burst[j] = plannedCall{kind: kind, key: k, conflict: kind == callPay && classes[k] == classNormal && rng.Float64() < conflict}
				}
				bursts = append(bursts, burst)
				n -= m
			}
		}
	}
	addBursts(callPay, st.Keys, st.Calls, st.Conflict)
	addBursts(callShip, st.ShipmentKeys, st.Shipments, 0)
	rng.Shuffle(len(bursts), func(i, j int) { bursts[i], bursts[j] = bursts[j], bursts[i] })
	var plan []plannedCall
	for _, b := range bursts {
		plan = append(plan, b...)
	}
	results := make([]callResult, len(plan))

	env := &Env{Backend: b.Name, Handle: h, Recorder: rec, Ledger: ledger, Tenant: tenant, Seed: seed, Short: st.Short,
		total: len(plan), completed: make(chan idem.Key, 4096), losses: map[string]int{}}
	if sc.OwnRedis {
		env.Redis = redisSrv
	}
	if sc.OwnPG {
		env.PG = pgSrv
	}
	env.Cluster = cluster
	env.faults.Add(st.Faults)
	faultsOver := make(chan struct{})
	go func() { env.faults.Wait(); close(faultsOver) }()
	rec.OnComplete = func(k idem.Key) {
		select {
		case env.completed <- k:
		default:
		}
	}
	bgCtx, stopBg := context.WithCancel(ctx)
	var bg sync.WaitGroup
	var bgErrs []error
	var bgMu sync.Mutex
	swept := 0
	startBg := func(f func(ctx context.Context) error) {
		bg.Go(func() {
			if err := f(bgCtx); err != nil && bgCtx.Err() == nil {
				bgMu.Lock()
				bgErrs = append(bgErrs, err)
				bgMu.Unlock()
			}
		})
	}
	if st.Sweep > 0 && h.Sweep != nil {
		sw := idem.NewSweeper(sweepFunc(h.Sweep), idem.WithSweepInterval(st.Sweep), idem.WithSweepBatch(64),
			idem.WithSweepObserver(func(ev idem.SweepEvent) {
				bgMu.Lock()
				defer bgMu.Unlock()
				swept += ev.Removed
				if ev.Err != nil && bgCtx.Err() == nil && !st.StoreFaults {
					bgErrs = append(bgErrs, ev.Err)
				}
			}))
		startBg(func(ctx context.Context) error { sw.Run(ctx); return nil })
	}
	for _, f := range st.Background {
		startBg(func(ctx context.Context) error { return f(ctx, env) })
	}

	// The storm.
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	env.start.Store(&start)
	for w := range st.Workers {
		wctx := withClient(ctx, w)
		wg.Go(func() {
			for i := range next {
				c := plan[i]
				cctx, cancel := context.WithTimeout(wctx, st.CallTimeout)
				t0 := time.Now()
				var r callResult
				switch c.kind {
				case callPay:
					o := &billing.Order{ID: orderID(c.key), Customer: customerID(c.key), Amount: amount(c.key)}
					if c.conflict {
						o.Amount++
					}
					r.receipt, r.err = svc.Pay(cctx, o, "pay")
				case callShip:
					r.err = svc.HandleShipment(cctx, shipment(c.key))
				}
				r.at, r.dur = t0.Sub(start), time.Since(t0)
				cancel()
				results[i] = r
				if st.ErrorPause > 0 {
					if k := Classify(r.err); k == "store" || k == "db" {
						time.Sleep(st.ErrorPause)
					}
				}
			}
		})
	}
	hold := -1
	if st.HoldAt > 0 {
		hold = int(st.HoldAt * float64(len(plan)))
	}
	for i := range plan {
		if i == hold {
			select {
			case <-faultsOver:
			case <-ctx.Done():
			}
		}
		next <- i
		env.issued.Store(int64(i + 1))
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	stopBg()
	bg.Wait()

	rec.OnComplete = nil
	res := &Result{Scenario: sc.Name, Store: b.Name, Calls: st.Calls, Keys: st.Keys, Elapsed: elapsed,
		Kinds: map[string]int{}, Events: events, Swept: swept, Documented: map[string]int{},
		ShipCalls: st.Shipments, ShipKeys: st.ShipmentKeys, Notes: env.notes}
	for _, err := range bgErrs {
		res.failf("background: %v", err)
	}
	// Executions: Debit calls counted by the ledger, or, in transactional
	// mode, the committed rows of the business table (a rolled-back write
	// did not happen).
	execs := map[string]int{}
	for k := range st.Keys {
		execs[orderID(k)] = ledger.Executions(orderID(k))
	}
	if h.Business != nil {
		committed, err := h.Business.Committed(ctx, tenant)
		if err != nil {
			return nil, fmt.Errorf("%s: count the business table: %w", b.Name, err)
		}
		for k := range st.Keys {
			id := orderID(k)
			res.RolledBack += ledger.Writes(id) - committed[id]
			execs[id] = committed[id]
		}
	}
	lim := limits{tx: h.Tx, mayLose: h.MayLose && env.lostAny(), env: env, completeErrs: completeErrs}

	// Latency over every call.
	durs := make([]time.Duration, len(results))
	for i, r := range results {
		durs[i] = r.dur
	}
	slices.Sort(durs)
	if len(durs) > 0 {
		res.P50 = durs[len(durs)*50/100]
		res.P99 = durs[min(len(durs)*99/100, len(durs)-1)]
	}

	checkCalls(res, &st, plan, results, classes, execs, ledger, keyEvents, lim)

	// The probe: no record may be left PROCESSING past its lease.
	probe(ctx, res, &st, rec, tenant, plan, results, keyEvents, lim)

	// Every key the history touches must be one the probe derived.
	known := map[[32]byte]bool{}
	for k := range st.Keys {
		key, _ := payKey(tenant, k)
		known[key.ID] = true
	}
	for k := range st.ShipmentKeys {
		key, _ := shipKey(tenant, k)
		known[key.ID] = true
	}
	for id, text := range rec.Keys() {
		if !known[id] {
			res.failf("the history holds key %q that the probe did not derive (key derivation drifted from the wrapper)", text)
		}
	}

	mo := ModelOptions{StaleReplay: h.StaleReplay, MayLose: lim.mayLose}
	cr, err := Check(rec.History(), mo, st.CheckTimeout, opt.VizDir, sc.Name+"-"+b.Name)
	res.Check = cr
	if err != nil {
		res.failf("visualization: %v", err)
	}
	switch cr.Result {
	case porcupine.Illegal:
		msg := "the store history is not linearizable against the model"
		if cr.Viz != "" {
			msg += " (see " + cr.Viz + ")"
		}
		res.failf("%s", msg)
	case porcupine.Unknown:
		res.failf("the linearizability check did not finish within %v", st.CheckTimeout)
	}
	return res, nil
}

// limits are the documented limits that apply to a run.
type limits struct {
	tx bool // transactional mode: no takeover, no lease-mode stall limit
	// mayLose: plain Redis, and the scenario lost records.
	mayLose bool
	env     *Env
	// completeErrs counts, per key text, the store_error events the
	// executor's observer reported for a Complete (after its retries).
	completeErrs map[string]int
}

// allow returns how many executions key (text) may have, and why more than
// one: lease mode's stall after the side effect; a Complete that failed
// (the key stays PROCESSING until its lease lapses, and a retry then runs
// the method again: README, "Not guaranteed"); a record plain Redis lost.
// Transactional mode has no such limit: a failed commit rolls the method's
// writes back with it.
func (l limits) allow(text string, class keyClass) (n int, why map[string]int) {
	why = map[string]int{}
	if class == classStallAfter && !l.tx {
		why["stall-after-effect"] = 1
	}
	if !l.tx && l.completeErrs[text] > 0 {
		why["complete-store-error"] = l.completeErrs[text]
	}
	if l.mayLose {
		if n := l.env.lossesOf(text); n > 0 {
			why["lost-record"] = n
		}
	}
	n = 1
	for _, k := range why {
		n += k
	}
	return n, why
}

// checkCalls checks executions per key and every caller's outcome.
func checkCalls(res *Result, st *Storm, plan []plannedCall, results []callResult, classes []keyClass, execs map[string]int, ledger *Ledger, keyEvents map[string]map[string]int, lim limits) {
	type perKey struct {
		receipt *billing.Receipt
		paid    bool // a call got a receipt
		kinds   map[string]int
	}
	pays := make([]perKey, st.Keys)
	limit := make([]int, st.Keys)
	why := make([]map[string]int, st.Keys)
	for k := range pays {
		pays[k].kinds = map[string]int{}
		limit[k], why[k] = lim.allow(orderID(k)+"+pay", classes[k])
	}
	for i, c := range plan {
		r := results[i]
		kind := Classify(r.err)
		res.Kinds[kind]++
		if kind == "store" || kind == "db" {
			if res.ErrTo == 0 || r.at < res.ErrFrom {
				res.ErrFrom = r.at
			}
			res.ErrTo = max(res.ErrTo, r.at+r.dur)
		}
		if c.kind == callShip {
			switch kind {
			case "ok", "in_progress":
			case "lease_lost":
				// Documented for these keys: their lease (15ms) can run out
				// during one store round trip under load; the takeover
				// fences the first worker.
			case "store", "db":
				if lim.tx && st.ShipmentTTL > 0 && strings.Contains(r.err.Error(), "the claimed row is gone") {
					// The transactional counterpart: the record's TTL
					// (30ms) ran out before the commit, which then finds
					// no live row and rolls everything back.
					continue
				}
				if !st.StoreFaults {
					res.failf("shipment %s: undocumented store error: %v", messageID(c.key), r.err)
				}
			default:
				res.failf("shipment %s: unexpected %s: %v", messageID(c.key), kind, r.err)
			}
			continue
		}
		pk := &pays[c.key]
		pk.kinds[kind]++
		class := classes[c.key]
		allowed := map[string]bool{"in_progress": true}
		switch class {
		case classNormal:
			allowed["ok"], allowed["mismatch"], allowed["transient"] = true, true, true
		case classPoor:
			allowed["final"], allowed["transient"] = true, true
		case classStallFinal:
			if lim.tx {
				// No takeover in transactional mode: the stalled call
				// holds the key's transaction; its final error commits
				// and is replayed.
				allowed["final"] = true
			} else {
				allowed["ok"], allowed["lease_lost"] = true, true
			}
		case classStallAfter:
			allowed["ok"] = true
			if !lim.tx {
				allowed["lease_lost"] = true
			}
		case classStallTransient:
			allowed["ok"], allowed["transient"] = true, true
		}
		if st.StoreFaults {
			allowed["store"], allowed["db"] = true, true
		}
		if why[c.key]["lost-record"] > 0 {
			// The record was lost under a running call: its Complete finds
			// no record (ErrLeaseLost: "or the record is gone").
			allowed["lease_lost"] = true
		}
		if !allowed[kind] {
			res.failf("order %s: undocumented outcome %s: %v", orderID(c.key), kind, r.err)
		}
		want := amount(c.key)
		if c.conflict {
			want++
		}
		if kind != "ok" {
			continue
		}
		pk.paid = true
		rc := r.receipt
		if rc == nil || rc.OrderID != orderID(c.key) || rc.Amount != want {
			res.failf("order %s: a call with amount %d got receipt %+v", orderID(c.key), want, rc)
			continue
		}
		switch {
		case pk.receipt == nil:
			pk.receipt = rc
		case *pk.receipt != *rc && limit[c.key] == 1:
			res.failf("order %s: two different receipts: %+v and %+v", orderID(c.key), *pk.receipt, *rc)
		}
	}

	res.ExecMin, res.ExecMax = -1, 0
	for k := range st.Keys {
		id := orderID(k)
		n := execs[id]
		if lim.tx && (classes[k] == classPoor || classes[k] == classStallFinal) {
			// Counted from the business table, a final error commits no
			// row (its writes roll back to the savepoint): not in min/max.
		} else if res.ExecMin < 0 || n < res.ExecMin {
			res.ExecMin = n
		}
		res.ExecMax = max(res.ExecMax, n)
		if n > limit[k] {
			res.failf("order %s executed %d times (limit %d: %v)", id, n, limit[k], why[k])
		}
		if n > 1 && n <= limit[k] {
			res.DocumentedDup += n - 1
			// Attribute the extra executions to the limits, in this order.
			extra := n - 1
			for _, w := range []string{"stall-after-effect", "complete-store-error", "lost-record"} {
				d := min(extra, why[k][w])
				res.Documented[w] += d
				extra -= d
			}
		}
		if pays[k].paid && n == 0 {
			res.failf("order %s: a call got a receipt but no execution of the method counts", id)
		}
		ev := keyEvents[id+"+pay"]
		kinds := pays[k].kinds
		switch classes[k] {
		case classStallFinal, classStallAfter, classStallTransient:
			if lim.tx {
				if ev["taken_over"] > 0 || ev["lease_lost"] > 0 {
					res.failf("order %s: a takeover or a lost lease in transactional mode (events %v)", id, ev)
				}
				continue
			}
		}
		switch classes[k] {
		case classStallFinal, classStallAfter:
			if ev["taken_over"] < 1 {
				res.failf("order %s: the stalled worker's key was never taken over", id)
			}
			if kinds["lease_lost"] != 1 {
				res.failf("order %s: want exactly one call (the zombie) to get ErrLeaseLost, got %d", id, kinds["lease_lost"])
			}
		case classStallTransient:
			if ev["taken_over"] < 1 {
				res.failf("order %s: the stalled worker's key was never taken over", id)
			}
			if ev["lease_lost"] < 1 {
				res.failf("order %s: the zombie's Release was not fenced (no lease_lost event)", id)
			}
		case classPoor:
			if kinds["ok"] > 0 {
				res.failf("order %s: a customer without funds was charged", id)
			}
		}
	}
	if res.ExecMin < 0 {
		res.ExecMin = 0
	}

	if st.ShipmentKeys > 0 {
		res.ShipExecMin = -1
		for k := range st.ShipmentKeys {
			n := ledger.Shipments(shipOrder(k))
			if res.ShipExecMin < 0 || n < res.ShipExecMin {
				res.ShipExecMin = n
			}
			res.ShipExecMax = max(res.ShipExecMax, n)
		}
	}
}

// probe claims every key once more after the run, with the payload of its
// normal calls and a fresh token: a final record or a free key is fine; a
// PROCESSING record with a live lease is waited for (its lease plus a
// margin) and must then be gone or lapsed; a lapsed one that the probe takes
// over is a claim left behind by a store call that failed: allowed only in
// fault scenarios, and only for keys whose calls saw a store error (it is
// not stuck: any retry takes it over, as the probe did). A free key after a
// call got its outcome is a lost record: a failure, except where the store
// documents losses and the scenario lost records.
func probe(ctx context.Context, res *Result, st *Storm, store idem.Store, tenant string, plan []plannedCall, results []callResult, keyEvents map[string]map[string]int, lim limits) {
	decided := map[int]bool{}
	for i, c := range plan {
		if c.kind == callPay {
			if k := Classify(results[i].err); k == "ok" || k == "final" {
				decided[c.key] = true
			}
		}
	}
	type target struct {
		key      idem.Key
		fp       idem.Fingerprint
		expiring bool
		decided  bool
	}
	var targets []target
	for k := range st.Keys {
		key, fp := payKey(tenant, k)
		targets = append(targets, target{key, fp, false, decided[k]})
	}
	for k := range st.ShipmentKeys {
		key, fp := shipKey(tenant, k)
		targets = append(targets, target{key, fp, st.ShipmentTTL > 0, false})
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	pctx := withClient(ctx, st.Workers)
	var tokens idem.Token = 0x9_0000_0000
	for i, t := range targets {
		tok := tokens + idem.Token(i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			outcome, msg := probeOne(pctx, store, t.key, t.fp, tok)
			for try := 0; outcome == "error" && st.StoreFaults && try < 10; try++ {
				// A fault may leave broken connections in the store's
				// pool: each fails once. Retry as a client would.
				time.Sleep(20 * time.Millisecond)
				outcome, msg = probeOne(pctx, store, t.key, t.fp, tok+idem.Token(try+1)<<48)
			}
			mu.Lock()
			defer mu.Unlock()
			switch outcome {
			case "final":
				res.Probe.Final++
			case "free":
				res.Probe.Free++
				if t.decided && !t.expiring && (!lim.mayLose || lim.env.lossesOf(t.key.Text) == 0) {
					res.failf("key %s: a call got its outcome, but the record is gone", t.key.Text)
				}
			case "leaked":
				res.Probe.Leaked++
				if !st.StoreFaults || keyEvents[t.key.Text]["store_error"] == 0 {
					res.failf("key %s: a PROCESSING record was left behind (taken over by the probe) without a store error to explain it", t.key.Text)
				}
			case "stuck":
				res.Probe.Stuck++
				res.failf("key %s: %s", t.key.Text, msg)
			default:
				res.failf("key %s: probe: %s", t.key.Text, msg)
			}
		})
	}
	wg.Wait()
}

func probeOne(ctx context.Context, store idem.Store, key idem.Key, fp idem.Fingerprint, tok idem.Token) (string, string) {
	var last idem.Record
	for attempt := range 3 {
		req := idem.ClaimRequest{Key: key, Fingerprint: fp, Token: tok + idem.Token(attempt)<<40, Lease: time.Second, TTL: 2 * time.Second}
		c, err := store.Claim(ctx, req)
		if err != nil {
			return "error", err.Error()
		}
		if c.Claimed {
			if err := store.Release(ctx, key, req.Token); err != nil {
				return "error", "release of the probe's claim: " + err.Error()
			}
			if c.TakenOver {
				return "leaked", ""
			}
			return "free", ""
		}
		if c.Record.Status != idem.StatusProcessing {
			return "final", ""
		}
		if c.Record.LeaseLeft <= 0 {
			// Lapsed, but held under another payload: the probe cannot
			// take it over; it was left behind all the same.
			return "leaked", ""
		}
		if attempt > 0 && c.Record.Token == last.Token && c.Record.LeaseLeft > 0 {
			break
		}
		last = c.Record
		time.Sleep(c.Record.LeaseLeft + 20*time.Millisecond)
	}
	return "stuck", fmt.Sprintf("still PROCESSING (token %x, lease left %v) after its lease ran out", uint64(last.Token), last.LeaseLeft)
}

// sweepFunc is a Handle's Sweep as an idem.Sweepable.
type sweepFunc func(ctx context.Context, limit int) (int, error)

// Sweep calls f.
func (f sweepFunc) Sweep(ctx context.Context, limit int) (int, error) { return f(ctx, limit) }
