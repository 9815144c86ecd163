package stress

import (
	"context"
	"errors"
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
	return killMidStorm(Scenario{
		Name:    name,
		About:   "PostgreSQL primary killed mid-storm, streaming standby (" + mode + ") promoted; pool on both hosts, target_session_attrs=read-write",
		Applies: only("pg", "pg-tx"),
		Own: func(ctx context.Context) (*Owned, error) {
			rep, err := StartPGReplica(ctx, mode)
			if err != nil {
				return nil, err
			}
			return &Owned{Servers: Servers{PGDSN: rep.DSN}, Value: rep, Stop: rep.Stop}, nil
		},
	}, midStormKill[*PGReplica]{
		// The storm must still run through the window: it holds late.
		holdAt:  0.8,
		mayLose: async,
		lostAll: async,
		window:  &windowLog{},
		before:  func(ctx context.Context, rep *PGReplica) error { return rep.fallBehind(ctx) },
		behind:  failoverWindow,
		victim:  "primary",
		kill:    func(ctx context.Context, rep *PGReplica) error { return rep.Kill(ctx) },
		recover: func(ctx context.Context, rep *PGReplica) (string, error) {
			if err := rep.Promote(ctx); err != nil {
				return "", fmt.Errorf("%w\n%s", err, rep.Log())
			}
			return "promoted", nil
		},
	})
}

// fallBehind makes the standby catch up with every write the primary
// acknowledged, then stops replicating to it (the window begins).
func (s *PGReplica) fallBehind(ctx context.Context) error {
	if err := s.CatchUp(ctx); err != nil {
		return err
	}
	return s.Lag(ctx)
}

// midStormKill is the part of a failover scenario that differs from the
// others, for killMidStorm: what it kills, how the cluster is readied
// before and recovers after, and what the kill may lose. T is the type of
// the scenario's Owned.Value.
type midStormKill[T any] struct {
	holdAt float64 // the storm holds at this fraction of its calls until the fault is done
	// mayLose: the model lets records vanish (Storm.MayLose); lostAll:
	// the kill loses what the replicas had not received (Env.LostAll).
	mayLose, lostAll bool
	// window, when set, logs the writes acknowledged from before the
	// readying until just after the kill, and Verify allows extra
	// executions on their keys only (windowLog.verify; async: mayLose).
	window *windowLog
	// before readies the cluster once a call is held after its side
	// effect (a standby catches up and then stops replicating); nil:
	// nothing to do.
	before func(ctx context.Context, own T) error
	// behind is how long the standby falls behind before the kill (the
	// storm's short flag in, the duration out); nil: no wait.
	behind func(short bool) time.Duration
	victim string // what kill kills, for the run's note
	kill   func(ctx context.Context, own T) error
	// recover waits until the cluster takes writes again (a promotion)
	// and says what happened, for the note; the time from the kill is the
	// run's outage (Env.Outage). Nil: the cluster never stopped taking
	// writes (a node of a multi-primary cluster).
	recover func(ctx context.Context, own T) (string, error)
}

// killMidStorm is sc with the failover skeleton every failover scenario
// shares: a faulty storm over four times the keys, each retried a quarter
// as often (most keys are still undecided when the fault comes), and one
// fault in the background. At 10% of the calls the next call to make its
// side effect is held before its Complete, the cluster is readied
// (k.before, then k.behind), k.kill kills its primary (or a node), the
// held call is let go, and k.recover waits for the cluster to take writes
// again; the storm holds at k.holdAt until then. The run's note says what
// was killed at which call and how long the recovery took.
func killMidStorm[T any](sc Scenario, k midStormKill[T]) Scenario {
	name := sc.Name
	if w, own := k.window, sc.Own; w != nil {
		sc.Own = func(ctx context.Context) (*Owned, error) {
			w.reset()
			return own(ctx)
		}
		sc.Verify = func(res *Result, env *Env, execs map[string]int) { w.verify(res, env, execs, k.mayLose) }
	}
	sc.Configure = func(s *Storm) {
		faulty(s)
		s.Keys *= 4
		s.MayLose = k.mayLose
		s.Faults, s.HoldAt = 1, k.holdAt
		var behind time.Duration
		if k.behind != nil {
			behind = k.behind(s.Short)
		}
		s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
			defer env.FaultDone()
			if err := k.run(ctx, env, behind); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	return sc
}

// run is the background fault of killMidStorm.
func (k midStormKill[T]) run(ctx context.Context, env *Env, behind time.Duration) error {
	own := env.Own.(T)
	if err := env.WaitProgress(ctx, 0.1); err != nil {
		return errors.New("the storm ended before 10% of its calls")
	}
	release, held := env.HoldNextEffect(ctx, 10*time.Second)
	defer release()
	// Every write acknowledged before from is on the replicas once
	// k.before has returned.
	from := len(env.Recorder.History())
	if k.before != nil {
		if err := k.before(ctx, own); err != nil {
			return err
		}
	}
	lagged := len(env.Recorder.History())
	time.Sleep(behind)
	t0 := time.Now()
	if err := k.kill(ctx, own); err != nil {
		return err
	}
	killedAt := env.Issued()
	to := 0
	if k.window != nil {
		// A reply the primary sent just before it died reaches its
		// caller's Recorder a moment later.
		time.Sleep(50 * time.Millisecond)
		to = len(env.Recorder.History())
	}
	release()
	if k.lostAll {
		env.LostAll()
	}
	note := fmt.Sprintf("%s killed at call %d", k.victim, killedAt)
	if behind > 0 {
		note = fmt.Sprintf("standby %v behind (%d operations meanwhile), %s", behind, to-lagged, note)
	}
	if k.recover != nil {
		what, err := k.recover(ctx, own)
		if err != nil {
			return err
		}
		took := time.Since(t0)
		env.Outage(took)
		note += fmt.Sprintf(", %s in %v", what, took.Round(time.Millisecond))
	}
	if k.window != nil {
		k.window.set(env, from, to)
	}
	if !held {
		env.Note("no side effect to hold")
	}
	env.Note("%s", note)
	return nil
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
	return killMidStorm(Scenario{
		Name:    "sentinel-failover",
		About:   "Redis master SIGKILLed mid-storm, replica promoted by three Sentinels; go-redis failover client",
		Applies: only("redis-sentinel", "tiered-sentinel"),
		Own: func(ctx context.Context) (*Owned, error) {
			sr, err := StartSentinelRedis(ctx)
			if err != nil {
				return nil, err
			}
			return &Owned{Servers: Servers{Sentinel: &sr.Sentinel}, Value: sr, Stop: sr.Stop}, nil
		},
	}, midStormKill[*SentinelRedis]{
		holdAt:  0.6,
		lostAll: true, // whatever the replica had not received
		victim:  "master",
		kill:    func(ctx context.Context, sr *SentinelRedis) error { return sr.KillMaster(ctx) },
		recover: func(ctx context.Context, sr *SentinelRedis) (string, error) {
			addr, err := sr.WaitMaster(ctx)
			return addr + " promoted", err
		},
	})
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
	return killMidStorm(Scenario{
		Name:    "tiered-double-failover",
		About:   "tiered: Redis master (Sentinel) and PostgreSQL primary (async standby, lagging) killed together, both promoted",
		Applies: only("tiered-sentinel"),
		Own: func(ctx context.Context) (*Owned, error) {
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
	}, midStormKill[*doubleFailover]{
		holdAt:  0.8,
		mayLose: true,
		lostAll: true,
		window:  &windowLog{},
		before:  func(ctx context.Context, d *doubleFailover) error { return d.pg.fallBehind(ctx) },
		behind:  failoverWindow,
		victim:  "primary and master",
		kill: func(ctx context.Context, d *doubleFailover) error {
			return both(func() error { return d.pg.Kill(ctx) }, func() error { return d.redis.KillMaster(ctx) })
		},
		recover: func(ctx context.Context, d *doubleFailover) (string, error) {
			return "both promoted", both(func() error { return d.pg.Promote(ctx) },
				func() error { _, err := d.redis.WaitMaster(ctx); return err })
		},
	})
}

// both runs a and b at once and returns their errors, joined.
func both(a, b func() error) error {
	var wg sync.WaitGroup
	var aerr, berr error
	wg.Go(func() { aerr = a() })
	wg.Go(func() { berr = b() })
	wg.Wait()
	return errors.Join(aerr, berr)
}
