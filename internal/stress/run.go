package stress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/internal/stress/stormsvc"
	"github.com/idemgen/idemgen/runtime/idem"
)

// Run runs scenario sc on backend b. Its phases, in order: the scenario's
// servers and the store (setUp), the keys and the service (prepare), the
// plan, the storm with its background injectors, then the checks on what
// the callers got, on the records left behind (probe) and on the store's
// history.
func Run(ctx context.Context, sc Scenario, b Backend, opt Options) (*Result, error) {
	r := newRun(sc, b, opt)
	defer r.tearDown()
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	r.prepare()
	r.makePlan()
	r.storm(ctx)
	res, err := r.collect(ctx)
	if err != nil {
		return nil, err
	}
	r.checkCalls(res)
	if r.st.Cut && res.Events["complete_retry"] == 0 {
		res.failf("the store was cut off, but no Complete met the outage: the run proves nothing")
	}
	r.probe(ctx, res)
	r.checkDerivation(res)
	r.checkHistory(res)
	if r.sc.Verify != nil {
		r.sc.Verify(res, r.env, r.execs)
	}
	return res, nil
}

// run is one scenario on one backend, from setUp to the checks.
type run struct {
	sc  Scenario
	b   Backend
	opt Options
	st  Storm

	// setUp: the scenario's own servers and the opened store.
	srv      Servers
	redis    *RedisServer
	pg       *PGServer
	mysql    *MySQLServer
	cluster  *ClusterServer
	own      any // the Value of the scenario's Own servers
	h        *Handle
	teardown []func() // in the order they must run

	// prepare: the keys, the service and what observes them.
	seed     uint64
	tenant   string
	classes  []keyClass // per Pay key
	classOf  map[string]keyClass
	stallFor time.Duration
	ledger   *Ledger
	rec      *Recorder
	obs      *observer
	// keyEvents is the observer's per-key counts when the run was collected.
	keyEvents map[string]map[string]int
	cut       *cutStore // Storm.Cut
	// cutStarted is closed when the cut armed by Storm.CutAtComplete starts.
	cutStarted chan struct{}
	svc        *stormsvc.IdempotentService

	// makePlan, storm: the calls and what each got.
	plan    []plannedCall
	results []callResult
	env     *Env
	bg      *background
	elapsed time.Duration

	// collect: executions per order, and the documented limits that apply
	// to the checks.
	execs map[string]int
	lim   limits
}

// newRun shapes the storm: the defaults, the options' counts, then the
// scenario's Configure.
func newRun(sc Scenario, b Backend, opt Options) *run {
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
	return &run{sc: sc, b: b, opt: opt, st: st}
}

// setUp starts the servers the scenario kills or restarts (unless the
// options bring them) and opens the store on them.
func (r *run) setUp(ctx context.Context) error {
	r.redis, r.pg = r.opt.Redis, r.opt.PG
	if r.sc.OwnRedis {
		if r.redis == nil {
			s, err := StartRedis(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", r.sc.Name, err)
			}
			r.teardown = append(r.teardown, s.Stop)
			r.redis = s
		}
		r.srv.RedisAddr = r.redis.Addr()
	}
	if r.sc.OwnPG {
		if r.pg == nil {
			s, err := StartPG(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", r.sc.Name, err)
			}
			r.teardown = append(r.teardown, s.Stop)
			r.pg = s
		}
		r.srv.PGDSN = r.pg.DSN
	}
	if r.sc.OwnMySQL {
		r.mysql = r.opt.MySQL
		if r.mysql == nil {
			s, err := StartMySQL(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", r.sc.Name, err)
			}
			r.teardown = append(r.teardown, s.Stop)
			r.mysql = s
		}
		r.srv.MySQLDSN = r.mysql.DSN
	}
	if r.sc.OwnCluster {
		s, err := StartCluster(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", r.sc.Name, err)
		}
		r.teardown = append(r.teardown, s.Stop)
		r.cluster = s
		r.srv.RedisClusterAddrs = s.Addrs()
	}
	if r.sc.Own != nil {
		o, err := r.sc.Own(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", r.sc.Name, err)
		}
		r.teardown = append(r.teardown, o.Stop)
		r.own = o.Value
		r.srv = o.Servers
	}
	h, err := r.b.Open(ctx, r.srv)
	if err != nil {
		return fmt.Errorf("%s: open store: %w", r.b.Name, err)
	}
	if h.Close != nil {
		r.teardown = append(r.teardown, h.Close)
	}
	r.h = h
	return nil
}

// tearDown closes the store, then stops the servers setUp started.
func (r *run) tearDown() {
	for _, f := range slices.Backward(r.teardown) {
		f()
	}
}

// prepare draws the seed and the tenant, assigns the key classes and builds
// the service: the counting ledger, the faulty gateway, the recorded and
// tweaked store under an observed executor, and the generated wrapper.
func (r *run) prepare() {
	st := &r.st
	r.seed = r.opt.Seed
	if r.seed == 0 {
		r.seed = mrand.Uint64()
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	r.tenant = "stress-" + r.sc.Name + "-" + hex.EncodeToString(rnd[:])

	// Key classes: stalled keys first, then poor ones, then normal ones.
	r.classes = make([]keyClass, st.Keys)
	i := 0
	for _, c := range []struct {
		n int
		c keyClass
	}{{st.StallFinal, classStallFinal}, {st.StallTransient, classStallTransient}, {st.StallAfter, classStallAfter}, {st.Poor, classPoor}} {
		for range c.n {
			if i < st.Keys {
				r.classes[i] = c.c
				i++
			}
		}
	}
	r.classOf = map[string]keyClass{}
	balances := map[string]int64{}
	for k := range st.Keys {
		r.classOf[orderID(k)] = r.classes[k]
		balances[customerID(k)] = 1 << 50
		if r.classes[k] == classPoor {
			balances[customerID(k)] = 0
		}
	}
	r.stallFor = st.StallFor
	if r.stallFor == 0 {
		r.stallFor = 3 * st.StallLease
	}

	r.ledger = NewLedger(balances)
	if r.h.Business != nil {
		r.ledger.Write = func(ctx context.Context, order, paymentID string) error {
			return r.h.Business.Debit(ctx, r.tenant, order, paymentID)
		}
	}
	r.ledger.After = func(order string, n int) {
		if r.cut != nil {
			r.cut.effect()
		}
		if r.env != nil {
			r.env.gate.pass()
		}
		if r.classOf[order] == classStallAfter && n == 1 {
			time.Sleep(r.stallFor)
		} else if st.AfterEffect > 0 {
			time.Sleep(st.AfterEffect)
		}
	}
	gw := &Gateway{Hook: r.gatewayFault}

	var recStore idem.Store
	r.rec, recStore = recordStore(r.h.Store)
	stallKeys := map[string]bool{}
	for k := range st.Keys {
		if r.classes[k].stalls() {
			stallKeys[orderID(k)+"+pay"] = true
		}
	}
	tweak := tweakStore(recStore, func(k idem.Key) (time.Duration, time.Duration, bool) {
		switch {
		case k.Op == payOp && stallKeys[k.Text]:
			return st.StallLease, 0, true
		case k.Op == shipOp && st.ShipmentTTL > 0:
			return st.ShipmentTTL / 2, st.ShipmentTTL, true
		}
		return 0, 0, false
	})
	r.obs = newObserver()
	var store = tweak
	if st.Cut {
		if _, tx := tweak.(idem.TxStore); tx {
			panic("stress: Storm.Cut on a transactional store") // the scenario's Applies excludes them
		}
		r.cut = &cutStore{next: tweak, answer: st.CutAnswer}
		if st.CutAtComplete > 0 {
			r.cutStarted = make(chan struct{})
			r.cut.arm(st.CutFor, true, int64(st.CutAtComplete), r.cutStarted)
		}
		store = r.cut
	}
	ex := idem.NewExecutor(store,
		idem.WithTenant(func(context.Context) string { return r.tenant }),
		idem.WithObserver(r.obs.observe))
	r.svc = stormsvc.NewIdempotentService(&stormsvc.Service{Ledger: r.ledger, Gateway: gw}, ex)
}

// gatewayFault is the gateway's hook: the first Authorize of a stalled key
// stalls and fails (final or transient by class); random transient failures
// spare stalled keys, so that their assertions are exact.
func (r *run) gatewayFault(order string, n int) (time.Duration, error) {
	c := r.classOf[order]
	switch {
	case c == classStallFinal && n == 1:
		return r.stallFor, stormsvc.ErrOrderClosed
	case c == classStallTransient && n == 1:
		return r.stallFor, stormsvc.ErrGatewayTimeout
	case c.stalls():
		return 0, nil
	case r.st.Transient > 0 && frac(r.seed, order, n) < r.st.Transient:
		return 0, stormsvc.ErrGatewayTimeout
	}
	return 0, nil
}

// observer counts the executor's events, in all and per key, and the
// store errors of a Complete per key (a documented limit).
type observer struct {
	mu           sync.Mutex
	events       map[string]int
	keyEvents    map[string]map[string]int
	completeErrs map[string]int
}

func newObserver() *observer {
	return &observer{events: map[string]int{}, keyEvents: map[string]map[string]int{}, completeErrs: map[string]int{}}
}

func (o *observer) observe(ev idem.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events[ev.Kind.String()]++
	m := o.keyEvents[ev.Key.Text]
	if m == nil {
		m = map[string]int{}
		o.keyEvents[ev.Key.Text] = m
	}
	m[ev.Kind.String()]++
	var se *StoreError
	if ev.Kind == idem.EventStoreError && errors.As(ev.Err, &se) && se.Op == "complete" {
		o.completeErrs[ev.Key.Text]++
	}
	if ev.Kind == idem.EventStoreRetry && errors.As(ev.Err, &se) && se.Op == "complete" {
		o.events["complete_retry"]++ // the executor keeps an outcome the store did not take
	}
}

// snapshot returns copies of the counts so far.
func (o *observer) snapshot() (events map[string]int, keyEvents map[string]map[string]int, completeErrs map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	keyEvents = make(map[string]map[string]int, len(o.keyEvents))
	for k, m := range o.keyEvents {
		keyEvents[k] = maps.Clone(m)
	}
	return maps.Clone(o.events), keyEvents, maps.Clone(o.completeErrs)
}

// makePlan lays out the calls: each key's copies in bursts, the bursts in
// random order.
func (r *run) makePlan() {
	st := &r.st
	rng := mrand.New(mrand.NewPCG(r.seed, 0x57e55))
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
					burst[j] = plannedCall{kind: kind, key: k, conflict: kind == callPay && r.classes[k] == classNormal && rng.Float64() < conflict}
				}
				bursts = append(bursts, burst)
				n -= m
			}
		}
	}
	addBursts(callPay, st.Keys, st.Calls, st.Conflict)
	addBursts(callShip, st.ShipmentKeys, st.Shipments, 0)
	rng.Shuffle(len(bursts), func(i, j int) { bursts[i], bursts[j] = bursts[j], bursts[i] })
	for _, b := range bursts {
		r.plan = append(r.plan, b...)
	}
	r.results = make([]callResult, len(r.plan))
}

// background runs the sweeper and the scenario's fault injectors during
// the storm, and keeps their errors.
type background struct {
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu    sync.Mutex
	errs  []error
	swept int
}

func (bg *background) start(f func(ctx context.Context) error) {
	bg.wg.Go(func() {
		if err := f(bg.ctx); err != nil && bg.ctx.Err() == nil {
			bg.mu.Lock()
			bg.errs = append(bg.errs, err)
			bg.mu.Unlock()
		}
	})
}

// startBackground builds the injectors' Env and starts the sweeper (when
// the storm sweeps and the store can) and every Background function.
func (r *run) startBackground(ctx context.Context) {
	st := &r.st
	r.env = &Env{Backend: r.b.Name, Handle: r.h, Recorder: r.rec, Ledger: r.ledger, Tenant: r.tenant, Seed: r.seed, Short: st.Short,
		Cluster: r.cluster, Own: r.own, total: len(r.plan), completed: make(chan idem.Key, 4096), losses: map[string]int{}, cut: r.cut, cutStarted: r.cutStarted}
	if r.sc.OwnRedis {
		r.env.Redis = r.redis
	}
	if r.sc.OwnPG {
		r.env.PG = r.pg
	}
	if r.sc.OwnMySQL {
		r.env.MySQL = r.mysql
	}
	r.env.faults.Add(st.Faults)
	r.rec.OnComplete = func(k idem.Key) {
		select {
		case r.env.completed <- k:
		default:
		}
	}
	bg := &background{}
	bg.ctx, bg.stop = context.WithCancel(ctx)
	r.bg = bg
	if st.Sweep > 0 && r.h.Sweep != nil {
		sw := idem.NewSweeper(sweepFunc(r.h.Sweep), idem.WithSweepInterval(st.Sweep), idem.WithSweepBatch(64),
			idem.WithSweepObserver(func(ev idem.SweepEvent) {
				bg.mu.Lock()
				defer bg.mu.Unlock()
				bg.swept += ev.Removed
				if ev.Err != nil && bg.ctx.Err() == nil && !st.StoreFaults {
					bg.errs = append(bg.errs, ev.Err)
				}
			}))
		bg.start(func(ctx context.Context) error { sw.Run(ctx); return nil })
	}
	for _, f := range st.Background {
		bg.start(func(ctx context.Context) error { return f(ctx, r.env) })
	}
}

// storm issues the plan to the workers, holding at HoldAt until the faults
// are over, and waits for every call and every background function.
func (r *run) storm(ctx context.Context) {
	st := &r.st
	r.startBackground(ctx)
	faultsOver := make(chan struct{})
	go func() { r.env.faults.Wait(); close(faultsOver) }()

	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	r.env.start.Store(&start)
	for w := range st.Workers {
		wctx := withClient(ctx, w)
		wg.Go(func() {
			for i := range next {
				r.results[i] = r.call(wctx, start, r.plan[i])
				if st.ErrorPause > 0 {
					if k := Classify(r.results[i].err); k == "store" || k == "db" {
						time.Sleep(st.ErrorPause)
					}
				}
			}
		})
	}
	hold := -1
	if st.HoldAt > 0 {
		hold = int(st.HoldAt * float64(len(r.plan)))
	}
	for i := range r.plan {
		if i == hold {
			select {
			case <-faultsOver:
			case <-ctx.Done():
			}
		}
		next <- i
		r.env.issued.Store(int64(i + 1))
	}
	close(next)
	wg.Wait()
	r.elapsed = time.Since(start)
	r.bg.stop()
	r.bg.wg.Wait()
	r.rec.OnComplete = nil
}

// call makes one planned call through the wrapper, timed from the storm's
// start.
func (r *run) call(ctx context.Context, start time.Time, c plannedCall) callResult {
	ctx, cancel := context.WithTimeout(ctx, r.st.CallTimeout)
	defer cancel()
	t0 := time.Now()
	var res callResult
	switch c.kind {
	case callPay:
		o := &stormsvc.Order{ID: orderID(c.key), Customer: customerID(c.key), Amount: amount(c.key)}
		if c.conflict {
			o.Amount++
		}
		res.receipt, res.err = r.svc.Pay(ctx, o, "pay")
	case callShip:
		res.err = r.svc.HandleShipment(ctx, shipment(c.key))
	}
	res.at, res.dur = t0.Sub(start), time.Since(t0)
	return res
}

// collect starts the Result: counts, background errors, latencies, and the
// documented limits the checks apply.
func (r *run) collect(ctx context.Context) (*Result, error) {
	st := &r.st
	// The executor may still emit (a release it sends again in the
	// background) while the checks read: they read a copy.
	events, keyEvents, completeErrs := r.obs.snapshot()
	r.keyEvents = keyEvents
	res := &Result{Scenario: r.sc.Name, Store: r.b.Name, Calls: st.Calls, Keys: st.Keys, Elapsed: r.elapsed,
		Kinds: map[string]int{}, Events: events, Swept: r.bg.swept, Documented: map[string]int{},
		ShipCalls: st.Shipments, ShipKeys: st.ShipmentKeys, Notes: r.env.notes}
	for _, err := range r.bg.errs {
		res.failf("background: %v", err)
	}
	durs := make([]time.Duration, len(r.results))
	for i, c := range r.results {
		durs[i] = c.dur
	}
	slices.Sort(durs)
	if len(durs) > 0 {
		res.P50 = durs[len(durs)*50/100]
		res.P99 = durs[min(len(durs)*99/100, len(durs)-1)]
	}
	execs, rolledBack, err := r.executions(ctx)
	if err != nil {
		return nil, err
	}
	res.RolledBack = rolledBack
	r.lim = limits{tx: r.h.Tx, mayLose: (r.h.MayLose || st.MayLose) && r.env.lostAny(), env: r.env, completeErrs: completeErrs,
		outage: r.env.longestOutage(), leases: r.leases()}
	r.execs = execs
	return res, nil
}

// leases returns the lease of each key (by text), the shortest its
// recorded claims asked for (the Tweak's, for stalled keys).
func (r *run) leases() map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, op := range r.rec.History() {
		in := op.Input.(opInput)
		if in.Kind != opClaim && in.Kind != opClaimTx {
			continue
		}
		if l, ok := m[in.Text]; !ok || in.Lease < l {
			m[in.Text] = in.Lease
		}
	}
	return m
}

// executions returns the executions per order: Debit calls counted by the
// ledger, or, in transactional mode, the committed rows of the business
// table (a rolled-back write did not happen), with the rolled-back count.
func (r *run) executions(ctx context.Context) (execs map[string]int, rolledBack int, err error) {
	execs = map[string]int{}
	for k := range r.st.Keys {
		execs[orderID(k)] = r.ledger.Executions(orderID(k))
	}
	if r.h.Business == nil {
		return execs, 0, nil
	}
	// The count is a read, safe to repeat: a pooled connection that a
	// fault (pg-kill-backend) terminated while it sat idle fails its next
	// statement once, and the pool then replaces it.
	var committed map[string]int
	for attempt := 1; ; attempt++ {
		if committed, err = r.h.Business.Committed(ctx, r.tenant); err == nil {
			break
		}
		if attempt == 5 || ctx.Err() != nil {
			return nil, 0, fmt.Errorf("%s: count the business table (%d attempts): %w", r.b.Name, attempt, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	for k := range r.st.Keys {
		id := orderID(k)
		rolledBack += r.ledger.Writes(id) - committed[id]
		execs[id] = committed[id]
	}
	return execs, rolledBack, nil
}

// checkDerivation checks that every key the history touches is one the
// harness derives, and every claim's fingerprint one the harness derives for
// its key (the call's payload, or the conflicting one): the probe and the
// model rely on the harness deriving them as the wrapper does.
func (r *run) checkDerivation(res *Result) {
	fps := map[[32]byte][]idem.Fingerprint{}
	for k := range r.st.Keys {
		key, fp := payKey(r.tenant, k, false)
		_, conflict := payKey(r.tenant, k, true)
		fps[key.ID] = []idem.Fingerprint{fp, conflict}
	}
	for k := range r.st.ShipmentKeys {
		key, fp := shipKey(r.tenant, k)
		fps[key.ID] = []idem.Fingerprint{fp}
	}
	for _, op := range r.rec.History() {
		in := op.Input.(opInput)
		want, known := fps[in.Key]
		switch {
		case !known:
			res.failf("the history holds key %q that the harness did not derive (key derivation drifted from the wrapper)", in.Text)
			fps[in.Key] = nil // once per key
		case want != nil && (in.Kind == opClaim || in.Kind == opClaimTx) && !slices.Contains(want, in.FP):
			res.failf("key %s: a claim's fingerprint %x is none the harness derived (fingerprint derivation drifted from the wrapper)", in.Text, in.FP[:4])
			fps[in.Key] = nil
		}
	}
}

// checkHistory checks the recorded history against the model.
func (r *run) checkHistory(res *Result) {
	mo := ModelOptions{StaleReplay: r.h.StaleReplay, MayLose: r.lim.mayLose}
	cr, err := Check(r.rec.History(), mo, r.st.CheckTimeout, r.opt.VizDir, r.sc.Name+"-"+r.b.Name)
	res.Check = cr
	if err != nil {
		res.failf("visualization: %v", err)
	}
	switch cr.Result {
	case porcupine.Illegal:
		msg := "the store history is not linearizable against the model"
		if cr.Viz != "" {
			msg += " (see " + cr.Viz + " and " + cr.Dump + ")"
		}
		res.failf("%s", msg)
	case porcupine.Unknown:
		if cr.OverBudget != "" {
			res.failf("the linearizability check of key %s took more than %d steps of the model (stress.StepBudget, the same on every machine): the history is too ambiguous to decide", cr.OverBudget, StepBudget)
		} else {
			res.failf("the linearizability check of key %s was still running at the hang guard (%v)", cr.TimedOut, r.st.CheckTimeout)
		}
	}
}

func orderID(i int) string    { return fmt.Sprintf("o%03d", i) }
func customerID(i int) string { return fmt.Sprintf("c%03d", i) }
func amount(i int) int64      { return 100 + int64(i) }
func messageID(i int) string  { return fmt.Sprintf("m%03d", i) }
func shipOrder(i int) string  { return fmt.Sprintf("s%03d", i) }

// The operation names of stormsvc's wrapped methods: the generator's
// default, each method qualified by its package's import path.
const (
	payOp  = "github.com/idemgen/idemgen/internal/stress/stormsvc.Service.Pay"
	shipOp = "github.com/idemgen/idemgen/internal/stress/stormsvc.Service.HandleShipment"
)

// payKey derives Pay's key and fingerprint for order i (with the
// conflicting amount when conflict) the way the generated wrapper does;
// checkDerivation checks that the history agrees.
func payKey(tenant string, i int, conflict bool) (idem.Key, idem.Fingerprint) {
	var k idem.KeyParts
	k.String("order.ID", orderID(i))
	k.String("op", "pay")
	key, _ := k.Key(tenant, payOp)
	amt := amount(i)
	if conflict {
		amt++
	}
	var h idem.Hasher
	h.String(orderID(i))
	h.String(customerID(i))
	h.Int(amt)
	h.String("pay")
	fp, _ := h.Sum()
	return key, fp
}

// shipKey derives HandleShipment's key and fingerprint for message i.
func shipKey(tenant string, i int) (idem.Key, idem.Fingerprint) {
	m := shipment(i)
	var k idem.KeyParts
	k.String("msg.ID", m.ID)
	key, _ := k.Key(tenant, shipOp)
	var h idem.Hasher
	h.String(m.ID)
	h.String(m.OrderID)
	h.Int(int64(m.Points))
	fp, _ := h.Sum()
	return key, fp
}

func shipment(i int) stormsvc.ShipmentMessage {
	return stormsvc.ShipmentMessage{ID: messageID(i), OrderID: shipOrder(i), Points: 1}
}

// sweepFunc is a Handle's Sweep as an idem.Sweepable.
type sweepFunc func(ctx context.Context, limit int) (int, error)

// Sweep calls f.
func (f sweepFunc) Sweep(ctx context.Context, limit int) (int, error) { return f(ctx, limit) }
