package stress

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/internal/stress/stormsvc"
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
	MySQLDSN  string // "" keeps the backend's
	// RedisClusterAddrs are the nodes of a Redis Cluster; nil keeps the
	// backend's.
	RedisClusterAddrs []string
	// Sentinel names a Redis master behind Sentinels (a failover
	// scenario's own); nil when there is none.
	Sentinel *Sentinel
}

// Sentinel is a Redis master as its Sentinels know it: a client asks them
// where the master is, and asks again after a failover.
type Sentinel struct {
	Master string   // the master's name in the Sentinels' configuration
	Addrs  []string // the Sentinels, host:port
}

// Owned is what a scenario's Own started for one run.
type Owned struct {
	// Servers are what the backend opens its store on.
	Servers Servers
	// Value reaches the injectors as Env.Own (the servers' handle).
	Value any
	// Stop ends the servers; it runs after the store is closed.
	Stop func()
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
	// OwnMySQL: the scenario kills and restarts the MySQL server, so it
	// runs on one the harness started (Options.MySQL, or one started for
	// the run).
	OwnMySQL bool
	// OwnCluster: the scenario kills a node of, or moves slots in, the
	// Redis Cluster, so it runs on one the harness starts for the run.
	OwnCluster bool
	// Own, when set, starts servers of the scenario's own for each run
	// (replicated ones: failover.go); their Servers override the
	// backend's, and their Value reaches the injectors as Env.Own.
	Own func(ctx context.Context) (*Owned, error)
	// Verify, when set, runs after every other check, with the executions
	// per order (execs; in transactional mode the committed business rows),
	// and may add failures or notes to res, or take back a failure the
	// scenario documents (a failover's window: failover.go).
	Verify func(res *Result, env *Env, execs map[string]int)
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
	// Cut puts a switch in front of the store (Env.CutAtNextComplete,
	// Env.CutAfterNextEffect): while it is off, every store call fails with
	// a connection refused before it reaches the store, as a store that
	// cannot be reached does, or with CutAnswer when it is set.
	Cut bool
	// CutAnswer, when set, is what the store answers every call with while
	// it is cut off: an error that can pass (idem.ErrStoreOutage), such as
	// a read-only database's during a failover.
	CutAnswer error
	// CutAtComplete, when > 0, arms the cut before the storm starts: the
	// run's CutAtComplete-th Complete starts it, for CutFor, and fails
	// with it (a Background function calls Env.CutOver). A run makes at
	// least one Complete per key, so a CutAtComplete up to the number of
	// keys is met on every run, whatever the machine's speed.
	CutAtComplete int
	CutFor        time.Duration
	// Background functions run during the storm (fault injectors); they must
	// return when ctx is done.
	Background []func(ctx context.Context, env *Env) error
	// Faults is how many Background injectors call Env.FaultDone once their
	// fault is over (the server is back); HoldAt, when > 0, is the fraction
	// of the calls after which the storm waits for them, so that the rest
	// of the calls run against a recovered server.
	Faults int
	HoldAt float64
	// MayLose: the scenario's faults may lose records the store
	// acknowledged (a failover to an asynchronous standby): when a fault
	// reports the loss (Env.LostAll), the checks apply the store's
	// lost-record allowance as they do for plain Redis (Handle.MayLose).
	MayLose bool
	// AfterEffect is how long Pay's body takes after its side effect (in
	// transactional mode: after the business write, before the commit).
	AfterEffect time.Duration

	CallTimeout time.Duration
	// CheckTimeout is the hang guard of the linearizability check, not its
	// budget: the check is bounded by StepBudget steps a key, the same on
	// every machine, so that a slow or loaded machine does not fail a
	// correct history.
	CheckTimeout time.Duration
}

// DefaultStorm is the plain storm: 10,000 calls over 100 keys, 32 workers
// (2,000 calls over 50 keys, 16 workers when short).
func DefaultStorm(short bool) Storm {
	s := Storm{
		Short: short, Calls: 10000, Keys: 100, Workers: 32, Burst: 8,
		Conflict: 0.01, Transient: 0.1, Poor: 5,
		StallLease:  300 * time.Millisecond,
		CallTimeout: 30 * time.Second, CheckTimeout: 5 * time.Minute,
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
	MySQL *MySQLServer
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
	// Redis, PG and MySQL are the scenario's own servers (OwnRedis, OwnPG,
	// OwnMySQL).
	Redis *RedisServer
	PG    *PGServer
	MySQL *MySQLServer
	// Cluster is the scenario's own Redis Cluster (OwnCluster).
	Cluster *ClusterServer
	// Own is the Value of the scenario's Own servers.
	Own any

	total     int
	start     atomic.Pointer[time.Time]
	issued    atomic.Int64
	faults    sync.WaitGroup
	completed chan idem.Key

	cut *cutStore // Storm.Cut
	// cutStarted is closed when the cut armed by Storm.CutAtComplete starts.
	cutStarted chan struct{}
	gate       effectGate
	mu         sync.Mutex
	losses     map[string]int // per key text
	lostAll    int
	notes      []string
	outageMax  time.Duration // the longest outage a fault caused
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

// Outage records that a fault left the store unreachable for d (a server
// killed or restarted until it is back, a cut store): the documented
// limit of lease mode applies to it only when d is at least the lease.
func (e *Env) Outage(d time.Duration) {
	e.mu.Lock()
	e.outageMax = max(e.outageMax, d)
	e.mu.Unlock()
}

// CutAfterNextEffect makes every store call fail for d (Storm.Cut: as
// unreachable, or with Storm.CutAnswer), starting right after the next side
// effect of Pay, records the outage and returns when it is over. Whether
// that call's Complete meets the outage depends on how soon the method
// returns: a scenario that needs a Complete to meet it uses
// CutAtNextComplete.
func (e *Env) CutAfterNextEffect(ctx context.Context, d time.Duration) error {
	return e.cutAt(ctx, d, false)
}

// CutAtNextComplete makes every store call fail for d (Storm.Cut: as
// unreachable, or with Storm.CutAnswer), starting at the next Complete,
// which fails with it: at least one Complete meets the outage, whatever
// the machine's speed (if one comes: Storm.CutAtComplete arms the cut
// before the storm, for a Complete that is sure to come). It records the
// outage and returns when it is over.
func (e *Env) CutAtNextComplete(ctx context.Context, d time.Duration) error {
	return e.cutAt(ctx, d, true)
}

// CutOver waits for the cut that Storm.CutAtComplete armed to start,
// records the outage and returns when it is over.
func (e *Env) CutOver(ctx context.Context) error {
	if e.cut == nil || e.cutStarted == nil {
		return errors.New("stress: the storm armed no cut (Storm.CutAtComplete)")
	}
	select {
	case <-e.cutStarted:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.cut.mu.Lock()
	d := e.cut.cutFor
	e.cut.mu.Unlock()
	e.Outage(d)
	return (idem.SystemClock{}).Sleep(ctx, d)
}

func (e *Env) cutAt(ctx context.Context, d time.Duration, atComplete bool) error {
	if e.cut == nil {
		return errors.New("stress: the storm has no cut (Storm.Cut)")
	}
	started := make(chan struct{})
	e.cut.arm(d, atComplete, 0, started)
	select {
	case <-started:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.Outage(d)
	if err := (idem.SystemClock{}).Sleep(ctx, d); err != nil {
		e.cut.until.Store(0)
		return err
	}
	return nil
}

// HoldNextEffect waits (at most wait) for the next side effect of Pay and
// holds that call right after it, before its Complete, until release is
// called: a fault injected meanwhile meets a method that ran and has its
// outcome to store. ok is false when no side effect came within wait.
func (e *Env) HoldNextEffect(ctx context.Context, wait time.Duration) (release func(), ok bool) {
	hit, rel := e.gate.arm()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-hit:
		var once sync.Once
		return func() { once.Do(func() { close(rel) }) }, true
	case <-ctx.Done():
	case <-t.C:
	}
	e.gate.disarm()
	return func() {}, false
}

// effectGate holds one call after its side effect (Env.HoldNextEffect).
type effectGate struct {
	mu      sync.Mutex
	hit     chan struct{} // closed by the held call; nil when not armed
	release chan struct{} // closed to let it go on
}

func (g *effectGate) arm() (hit, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hit, g.release = make(chan struct{}), make(chan struct{})
	return g.hit, g.release
}

func (g *effectGate) disarm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hit = nil
}

// pass is called after each side effect: an armed gate holds this call
// until it is released (at most a minute).
func (g *effectGate) pass() {
	g.mu.Lock()
	hit, release := g.hit, g.release
	g.hit = nil
	g.mu.Unlock()
	if hit == nil {
		return
	}
	close(hit)
	select {
	case <-release:
	case <-time.After(time.Minute):
	}
}

func (e *Env) longestOutage() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.outageMax
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
	receipt *stormsvc.Receipt
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
	// limit: "stall-after-effect" (lease mode), "complete-store-error"
	// (LimitOutage: the executor's observer reported a store_error for the
	// key's Complete, and an outage lasted at least the key's lease, so a
	// retry after the lease ran it again), "lost-record" (plain Redis
	// forgot the record).
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
	for _, k := range []string{"taken_over", "lease_lost", "store_error", "complete_retry"} {
		fmt.Fprintf(&b, " %s=%d", k, r.Events[k])
	}
	if r.ShipCalls > 0 {
		fmt.Fprintf(&b, " | expiring: calls=%d keys=%d exec/key=%d..%d swept=%d", r.ShipCalls, r.ShipKeys, r.ShipExecMin, r.ShipExecMax, r.Swept)
	}
	secs := r.Elapsed.Seconds()
	total := r.Calls + r.ShipCalls
	fmt.Fprintf(&b, " | %.0f calls/s p50=%v p99=%v", float64(total)/max(secs, 1e-9), round(r.P50), round(r.P99))
	fmt.Fprintf(&b, " | probe final=%d free=%d leaked=%d stuck=%d", r.Probe.Final, r.Probe.Free, r.Probe.Leaked, r.Probe.Stuck)
	fmt.Fprintf(&b, " | history %d ops/%d keys: %s (%d steps/key at most)", r.Check.Ops, r.Check.Keys, verdict(r.Check.Result), r.Check.Steps)
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
		return "undecided"
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
	case errors.Is(err, stormsvc.ErrInsufficientFunds), errors.Is(err, stormsvc.ErrOrderClosed):
		return "final"
	case errors.Is(err, stormsvc.ErrGatewayTimeout):
		return "transient"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "other"
}
