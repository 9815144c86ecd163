package stress

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// The failover scenarios: a replicated store's primary dies mid-storm and a
// replica takes over, as users run it. They start their own replicated
// servers (Scenario.Own), take longer than the other scenarios, and run in
// `make failover` (IDEM_FAILOVER=1, -tags failover), not in `make stress`;
// `make test` runs the shortest, pg-failover-sync on pgstore's lease mode.
// docs/FAILOVER.md holds the guarantee table they measure.

// FailoverScenarios returns the failover scenarios, in the order they run.
func FailoverScenarios() []Scenario {
	return []Scenario{PGFailover("sync"), PGFailover("remote_apply"), PGFailover("async"), SentinelFailover(), TieredDoubleFailover(), GaleraKill(),
		PatroniFailover("sync"), PatroniFailover("async")}
}

// FindFailover returns the failover scenario named name.
func FindFailover(name string) (Scenario, bool) {
	for _, s := range FailoverScenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// failoverWindow is how long the standby falls behind before the primary
// dies: the unreplicated window of an asynchronous standby, in which a
// synchronous primary makes its commits wait.
func failoverWindow(short bool) time.Duration {
	if short {
		return 500 * time.Millisecond
	}
	return time.Second
}

// PGFailover runs pgstore (lease and transactional mode) on a PostgreSQL
// primary with a streaming standby (scripts/pg-replica.sh, mode async,
// sync or remote_apply), the pool on a DSN naming both hosts with
// target_session_attrs=read-write, over four times the storm's keys. At
// 10% of the calls the next call to make its side effect is held before
// its Complete, the primary's walsender stops (the standby falls behind:
// the unreplicated window), and after the window the primary is SIGKILLed
// (every backend with it), the held call let go, and the standby
// promoted; the storm holds at 80% until it accepts writes (late, so that
// it still runs through the window).
//
// Synchronous modes: no commit the primary acknowledged is missing on the
// standby, so the full checks apply: every key executes once.
// Asynchronous: what the primary acknowledged in the window is lost (the
// model lets records vanish, as for plain Redis); a key may execute once
// more, and only a key the window wrote (Verify checks both, and reports
// the figures). In transactional mode the lost commit takes the business
// row with it: the committed rows still count one per key, but the
// method's body (its effects outside the database: the ledger's debits)
// ran again; Verify reports how often.
func PGFailover(mode string) Scenario {
	async := mode == "async"
	name := "pg-failover-" + strings.ReplaceAll(mode, "_", "-")
	w := &windowLog{}
	return Scenario{
		Name:    name,
		About:   "PostgreSQL primary killed mid-storm, streaming standby (" + mode + ") promoted; pool on both hosts, target_session_attrs=read-write",
		Applies: only("pg", "pg-tx"),
		Own: func(ctx context.Context) (*Owned, error) {
			w.reset()
			rep, err := StartPGReplica(ctx, mode)
			if err != nil {
				return nil, err
			}
			return &Owned{Servers: Servers{PGDSN: rep.DSN}, Value: rep, Stop: rep.Stop}, nil
		},
		Configure: func(s *Storm) {
			faulty(s)
			// Four times the keys, each retried a quarter as often: most
			// keys are still undecided when the primary dies.
			s.Keys *= 4
			s.MayLose = async
			// The storm must still run through the window: it holds late.
			s.Faults, s.HoldAt = 1, 0.8
			window := failoverWindow(s.Short)
			s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
				defer env.FaultDone()
				rep := env.Own.(*PGReplica)
				if err := env.WaitProgress(ctx, 0.1); err != nil {
					return fmt.Errorf("%s: the storm ended before 10%% of its calls", name)
				}
				release, held := env.HoldNextEffect(ctx, 10*time.Second)
				defer release()
				// Every write acknowledged before from is on the standby.
				from := len(env.Recorder.History())
				if err := rep.CatchUp(ctx); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				if err := rep.Lag(ctx); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				lagged := len(env.Recorder.History())
				time.Sleep(window)
				t0 := time.Now()
				if err := rep.Kill(ctx); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				// A reply the primary sent just before it died reaches
				// its caller's Recorder a moment later.
				time.Sleep(50 * time.Millisecond)
				to := len(env.Recorder.History())
				release()
				if err := rep.Promote(ctx); err != nil {
					return fmt.Errorf("%s: %w\n%s", name, err, rep.Log())
				}
				env.Outage(time.Since(t0))
				if async {
					env.LostAll()
				}
				w.set(env, from, to)
				if !held {
					env.Note("no side effect to hold")
				}
				env.Note("standby %v behind (%d operations meanwhile), primary killed at call %d, promoted in %v", window, to-lagged, env.Issued(), time.Since(t0).Round(time.Millisecond))
				return nil
			})
		},
		Verify: func(res *Result, env *Env, execs map[string]int) { w.verify(res, env, execs, async) },
	}
}

// windowLog is what a failover's window wrote: the keys whose writes the
// primary acknowledged after the last instant the standby was known to
// have every acknowledged write (the history's operations from, appended
// before PGReplica.CatchUp), up to the primary's death (to). An operation
// appended later was acknowledged by the promoted standby or failed.
type windowLog struct {
	mu      sync.Mutex
	written map[string]bool // Pay's orders
	writes  int
}

// recheck checks the history of the keys the window did not write, alone
// (w.mu held): the failover must have left them as they were.
func (w *windowLog) recheck(res *Result, env *Env) {
	var ops []porcupine.Operation
	for _, op := range env.Recorder.History() {
		order, _ := strings.CutSuffix(op.Input.(opInput).Text, "+pay")
		if !w.written[order] {
			ops = append(ops, op)
		}
	}
	cr, _ := Check(ops, ModelOptions{StaleReplay: env.Handle.StaleReplay, MayLose: true}, 5*time.Minute, "", "") // a hang guard: the verdict is StepBudget's
	switch cr.Result {
	case porcupine.Ok:
		res.Notes = append(res.Notes, fmt.Sprintf("history of the %d keys the window did not write (%d ops): linearizable; the window's keys went back to an earlier state", cr.Keys, cr.Ops))
	case porcupine.Illegal:
		res.failf("the history of the keys the failover's window did not write is not linearizable against the model")
	default:
		res.failf("the check of the keys the failover's window did not write did not finish")
	}
}

func (w *windowLog) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written, w.writes = nil, 0
}

func (w *windowLog) set(env *Env, from, to int) {
	h := env.Recorder.History()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written, w.writes = map[string]bool{}, 0
	for _, op := range h[from:min(to, len(h))] {
		in, out := op.Input.(opInput), op.Output.(opOutput)
		if out.Unknown || out.LeaseLost {
			continue
		}
		if (in.Kind == opClaim || in.Kind == opClaimTx) && !out.Claimed {
			continue // a read
		}
		w.writes++
		if order, ok := strings.CutSuffix(in.Text, "+pay"); ok {
			w.written[order] = true
		}
	}
}

// verify checks that every extra execution is on a key the window wrote
// (an asynchronous failover loses those writes, nothing else), and at most
// one per key (the lost-record allowance); it reports the window's writes,
// the extra executions, the lost outcomes (a receipt whose commit was lost,
// transactional mode), and the method's body runs beyond one per order (in
// transactional mode the body's effects outside the database are not
// rolled back with the lost commit).
func (w *windowLog) verify(res *Result, env *Env, execs map[string]int, async bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		res.failf("the failover did not happen")
		return
	}
	extra, bodyExtra := 0, 0
	var outside []string
	for order, n := range execs {
		if n > 1 {
			extra += n - 1
			if !w.written[order] {
				outside = append(outside, order)
			}
		}
		if b := env.Ledger.Executions(order); b > 1 && env.Handle.Tx {
			bodyExtra += b - 1
		}
	}
	// What an asynchronous failover may do to a key the window wrote, and
	// only to such a key, is taken back from the failures and counted:
	//   - a lost outcome: a caller got its receipt from a commit the
	//     failover lost (transactional mode: the record and the business
	//     row went together) and never called again, so no execution is
	//     left;
	//   - a rollback to PROCESSING: the standby had the claim but not the
	//     Complete, so the key is held for the rest of its lease (callers
	//     get ErrInProgress) and the probe takes it over;
	//   - the history of such a key is not linearizable against the model,
	//     which lets a record vanish but not go back to an earlier state;
	//     the history of every other key is checked again, alone.
	lost, rolledBack := 0, 0
	if async {
		kept := res.Failures[:0]
		illegal := false
		for _, f := range res.Failures {
			order, ok := strings.CutPrefix(f, "order ")
			order, _, _ = strings.Cut(order, ":")
			key, kok := strings.CutPrefix(f, "key ")
			key, _, _ = strings.Cut(key, "+pay:")
			switch {
			case ok && w.written[order] && strings.HasSuffix(f, ": a call got a receipt but no execution of the method counts"):
				lost++
			case kok && w.written[key] && strings.Contains(f, "a PROCESSING record was left behind"):
				rolledBack++
			case strings.HasPrefix(f, "the store history is not linearizable"):
				illegal = true
			default:
				kept = append(kept, f)
			}
		}
		res.Failures = kept
		if illegal {
			w.recheck(res, env)
		}
	}
	sort.Strings(outside)
	if len(outside) > 0 {
		res.failf("orders %v executed again although the failover's window wrote nothing of them", outside)
	}
	if !async && extra > 0 {
		res.failf("%d extra executions through a synchronous failover", extra)
	}
	note := fmt.Sprintf("window: %d acknowledged writes on %d orders; extra executions %d, lost outcomes %d, rolled back to PROCESSING %d",
		w.writes, len(w.written), extra, lost, rolledBack)
	if env.Handle.Tx {
		note += fmt.Sprintf(", body runs beyond one per order %d (rolled-back or lost commits)", bodyExtra)
	}
	res.Notes = append(res.Notes, note)
}

// SentinelFailover runs redisstore and tiered (over PostgreSQL) on a Redis
// master with one replica and three Sentinels (scripts/redis-sentinel.sh),
// through go-redis's failover client, over four times the storm's keys. At
// 10% of the calls the next call to make its side effect is held before
// its Complete, the master is SIGKILLed, the held call let go, and the
// Sentinels promote the replica (about 2s: down-after-milliseconds 1000);
// the storm holds at 60% until the client's master answers. Redis
// replicates asynchronously: plain Redis may lose records (the model lets
// them vanish; each loss allows one more execution, reported as
// lost-record); tiered keeps one execution per key (PostgreSQL decides
// every claim).
func SentinelFailover() Scenario {
	const name = "sentinel-failover"
	return Scenario{
		Name:    name,
		About:   "Redis master SIGKILLed mid-storm, replica promoted by three Sentinels; go-redis failover client",
		Applies: only("redis-sentinel", "tiered-sentinel"),
		Own: func(ctx context.Context) (*Owned, error) {
			sr, err := StartSentinelRedis(ctx)
			if err != nil {
				return nil, err
			}
			return &Owned{Servers: Servers{Sentinel: &sr.Sentinel}, Value: sr, Stop: sr.Stop}, nil
		},
		Configure: func(s *Storm) {
			faulty(s)
			s.Keys *= 4
			s.Faults, s.HoldAt = 1, 0.6
			s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
				defer env.FaultDone()
				sr := env.Own.(*SentinelRedis)
				if err := env.WaitProgress(ctx, 0.1); err != nil {
					return fmt.Errorf("%s: the storm ended before 10%% of its calls", name)
				}
				release, held := env.HoldNextEffect(ctx, 10*time.Second)
				defer release()
				t0 := time.Now()
				if err := sr.KillMaster(ctx); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				release()
				env.LostAll() // whatever the replica had not received
				addr, err := sr.WaitMaster(ctx)
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				env.Outage(time.Since(t0))
				if !held {
					env.Note("no side effect to hold")
				}
				env.Note("master killed at call %d, %s promoted in %v", env.Issued(), addr, time.Since(t0).Round(time.Millisecond))
				return nil
			})
		},
	}
}

// doubleFailover is what TieredDoubleFailover's Own started.
type doubleFailover struct {
	pg    *PGReplica
	redis *SentinelRedis
}

// TieredDoubleFailover runs tiered on Redis behind Sentinels in front of
// PostgreSQL with an asynchronous standby, and fails both over at once,
// the worst case of a shared outage: at 10% of the calls a call is held
// after its side effect, PostgreSQL's standby falls behind for the window
// (its walsender stopped), then the PostgreSQL primary and the Redis
// master are SIGKILLed, the held call let go, the standby promoted and the
// Sentinels promote the replica. What the PostgreSQL window acknowledged is
// lost (the model lets records vanish); Verify bounds the extra executions
// by the window's keys, as in pg-failover-async, and reports them.
func TieredDoubleFailover() Scenario {
	const name = "tiered-double-failover"
	w := &windowLog{}
	return Scenario{
		Name:    name,
		About:   "tiered: Redis master (Sentinel) and PostgreSQL primary (async standby, lagging) killed together, both promoted",
		Applies: only("tiered-sentinel"),
		Own: func(ctx context.Context) (*Owned, error) {
			w.reset()
			pg, err := StartPGReplica(ctx, "async")
			if err != nil {
				return nil, err
			}
			sr, err := StartSentinelRedis(ctx)
			if err != nil {
				pg.Stop()
				return nil, err
			}
			return &Owned{Servers: Servers{PGDSN: pg.DSN, Sentinel: &sr.Sentinel}, Value: &doubleFailover{pg: pg, redis: sr},
				Stop: func() { sr.Stop(); pg.Stop() }}, nil
		},
		Configure: func(s *Storm) {
			faulty(s)
			s.Keys *= 4
			s.MayLose = true
			s.Faults, s.HoldAt = 1, 0.8
			window := failoverWindow(s.Short)
			s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
				defer env.FaultDone()
				d := env.Own.(*doubleFailover)
				if err := env.WaitProgress(ctx, 0.1); err != nil {
					return fmt.Errorf("%s: the storm ended before 10%% of its calls", name)
				}
				release, held := env.HoldNextEffect(ctx, 10*time.Second)
				defer release()
				from := len(env.Recorder.History())
				if err := d.pg.CatchUp(ctx); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				if err := d.pg.Lag(ctx); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				lagged := len(env.Recorder.History())
				time.Sleep(window)
				t0 := time.Now()
				var wg sync.WaitGroup
				var perr, rerr error
				wg.Go(func() { perr = d.pg.Kill(ctx) })
				wg.Go(func() { rerr = d.redis.KillMaster(ctx) })
				wg.Wait()
				if perr != nil || rerr != nil {
					return fmt.Errorf("%s: %v; %v", name, perr, rerr)
				}
				time.Sleep(50 * time.Millisecond)
				to := len(env.Recorder.History())
				release()
				env.LostAll()
				wg.Go(func() { perr = d.pg.Promote(ctx) })
				wg.Go(func() { _, rerr = d.redis.WaitMaster(ctx) })
				wg.Wait()
				if perr != nil || rerr != nil {
					return fmt.Errorf("%s: %v; %v", name, perr, rerr)
				}
				env.Outage(time.Since(t0))
				w.set(env, from, to)
				if !held {
					env.Note("no side effect to hold")
				}
				env.Note("standby %v behind (%d operations meanwhile), primary and master killed at call %d, both promoted in %v", window, to-lagged, env.Issued(), time.Since(t0).Round(time.Millisecond))
				return nil
			})
		},
		Verify: func(res *Result, env *Env, execs map[string]int) { w.verify(res, env, execs, true) },
	}
}
