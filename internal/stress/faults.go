package stress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The fault scenarios. Each kills, restarts or cuts a server, or loses
// records, while the storm runs, and documents the errors callers may get
// (StoreFaults: a store error, or in transactional mode a failed business
// write). Workers back off 20ms after such an error.

// only is a Scenario.Applies for the named backends.
func only(names ...string) func(string) bool {
	return func(b string) bool { return slices.Contains(names, b) }
}

func faulty(s *Storm) {
	s.StoreFaults = true
	s.ErrorPause = 20 * time.Millisecond
}

// RedisKill SIGKILLs the scenario's own redis-server twice mid-run (at 30%
// and 65% of the calls; the storm holds at 80% until it is back) and restarts it on the same port without
// persistence: every record it held is lost. Tiered must keep one execution
// per key (PostgreSQL decides every claim); plain Redis executes a key again
// after the loss, its documented limit, reported as lost-record.
func RedisKill() Scenario {
	return Scenario{
		Name:     "redis-kill",
		About:    "redis-server SIGKILLed twice mid-run, restarted on the same port, records lost",
		Applies:  only("redis", "tiered"),
		OwnRedis: true,
		Configure: func(s *Storm) {
			faulty(s)
			outage := 300 * time.Millisecond
			if s.Short {
				outage = 150 * time.Millisecond
			}
			s.Faults, s.HoldAt = 2, 0.8
			// The two kills never overlap: the second waits for the
			// server the first one restarted, and kills that.
			var one sync.Mutex
			for _, at := range []float64{0.30, 0.65} {
				s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
					defer env.FaultDone()
					if err := env.WaitProgress(ctx, at); err != nil {
						return fmt.Errorf("redis-kill: the storm ended before %.0f%% of its calls", at*100)
					}
					one.Lock()
					defer one.Unlock()
					t0 := time.Now()
					env.Redis.Kill()
					env.LostAll()
					time.Sleep(outage)
					// Restart even if the storm ended meanwhile: the probe
					// needs the server.
					if err := env.Redis.Restart(context.WithoutCancel(ctx)); err != nil {
						return fmt.Errorf("redis-kill: restart: %w", err)
					}
					env.Outage(time.Since(t0))
					env.Note("SIGKILL at call %d, back in %v", int(at*float64(env.total)), time.Since(t0).Round(time.Millisecond))
					return nil
				})
			}
		},
	}
}

// RedisLoseKey deletes the Redis record of 30% of the keys right after
// their first outcome was stored, as a failover to a replica that had not
// received the write would: the key's waiting duplicates and later retries
// find no record. Tiered repairs it from PostgreSQL (one execution); plain
// Redis executes the key again (documented, reported as lost-record).
func RedisLoseKey() Scenario {
	return Scenario{
		Name:    "redis-lose-key",
		About:   "the Redis record of 30% of the keys lost between first call and retry (failover)",
		Applies: only("redis", "tiered", "redis-cluster", "tiered-cluster"),
		Configure: func(s *Storm) {
			s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
				seen := map[string]bool{}
				lost := 0
				defer func() { env.Note("lost %d records", lost) }()
				for {
					select {
					case <-ctx.Done():
						return nil
					case k := <-env.Completed():
						if seen[k.Text] || frac(env.Seed, k.Text, 0x1055) >= 0.3 {
							seen[k.Text] = true
							continue
						}
						seen[k.Text] = true
						if err := env.Lose(ctx, k); err != nil && ctx.Err() == nil {
							return fmt.Errorf("redis-lose-key: %w", err)
						}
						lost++
					}
				}
			})
		},
	}
}

// PGRestart restarts the scenario's own PostgreSQL server mid-run (at 15% of
// the calls, holding the first call that makes its side effect after that
// until the server is down, so that its Complete meets the outage; the
// storm holds at 60% until it is back): a fast shutdown, which terminates every session and rolls back
// open transactions, an outage, then a start on the same data directory and
// port. Calls fail with store errors during the outage; nothing executes
// twice: the executor keeps the outcome of a method that ran until the
// store is back (the outage is shorter than Pay's lease, 30s). Only an
// outage at least as long as a key's lease (the stalled keys' 300ms) allows
// a complete-store-error duplicate (LimitOutage). No record is left
// PROCESSING past its lease.
func PGRestart() Scenario {
	return Scenario{
		Name:    "pg-restart",
		About:   "PostgreSQL fast shutdown and start mid-run (same data directory and port)",
		Applies: only("pg", "pg-tx", "tiered"),
		OwnPG:   true,
		Configure: serverDown("pg-restart", "restart", func(ctx context.Context, env *Env, outage time.Duration, down func()) error {
			return env.PG.RestartCalling(ctx, outage, down)
		}),
	}
}

// serverDown is the Configure of a scenario that takes the scenario's own
// server down once, at 15% of the calls (early, while most keys are still
// undecided: later, tiered answers nearly every call from Redis alone),
// holding the first call that makes its side effect after that until the
// server is down (stop calls down then), so that at least its Complete
// meets the outage; the storm holds at 60% until the server is back. The
// outage is 1s (300ms when short). verb names the fault in the notes.
func serverDown(name, verb string, stop func(ctx context.Context, env *Env, outage time.Duration, down func()) error) func(*Storm) {
	return func(s *Storm) {
		faulty(s)
		outage := time.Second
		if s.Short {
			outage = 300 * time.Millisecond
		}
		s.Faults, s.HoldAt = 1, 0.6
		s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
			defer env.FaultDone()
			if err := env.WaitProgress(ctx, 0.15); err != nil {
				return fmt.Errorf("%s: the storm ended before 15%% of its calls", name)
			}
			release, held := env.HoldNextEffect(ctx, 10*time.Second)
			defer release()
			t0 := time.Now()
			if err := stop(ctx, env, outage, release); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if !held {
				env.Note("no side effect to hold")
			}
			env.Outage(time.Since(t0))
			env.Note("%s at call %d, back in %v", verb, int(0.15*float64(env.total)), time.Since(t0).Round(time.Millisecond))
			return nil
		})
	}
}

// StoreOutage cuts every store call off (a connection refused, before the
// call reaches the store) for 1s (400ms when short), shorter than Pay's
// lease, starting at a Complete past 30% of the calls (that Complete meets
// it, whatever the machine's speed), on every lease-mode store: the
// executors that ran their method meanwhile keep its outcome and store it
// when the store is back, so nothing executes twice (a duplicate charged
// to complete-store-error fails the run, the outage being shorter than the
// lease).
func StoreOutage() Scenario {
	return cutScenario("store-outage", "every store call refused for 1s (shorter than the lease) mid-run: outcomes kept, nothing runs twice", nil)
}

// StoreReadOnly is StoreOutage with a store that answers instead of being
// unreachable: every call gets the answer of a read-only database (SQLSTATE
// 25006, what a demoted primary or a standby answers during a failover),
// marked by the store as an error that can pass (idem.StoreOutage). It is
// an outage, not a refusal: nothing executes twice, and no "not stored"
// substitute replaces an outcome.
func StoreReadOnly() Scenario {
	return cutScenario("store-readonly", "every store call answered read-only (SQLSTATE 25006) for 1s mid-run: an outage, not a refusal",
		idem.StoreOutage(errors.New("ERROR: cannot execute UPDATE in a read-only transaction (SQLSTATE 25006)")))
}

func cutScenario(name, about string, answer error) Scenario {
	return Scenario{
		Name:    name,
		About:   about,
		Applies: func(b string) bool { return b != "pg-tx" && b != "mysql-tx" },
		Configure: func(s *Storm) {
			faulty(s)
			s.Cut, s.CutAnswer = true, answer
			s.CutFor = time.Second
			if s.Short {
				s.CutFor = 400 * time.Millisecond
			}
			// The Complete that starts the cut: past 30% of the keys' first
			// outcomes, and sure to come (every key completes at least once).
			s.CutAtComplete = max(1, s.Keys*3/10)
			s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
				if err := env.CutOver(ctx); err != nil {
					return nil // the storm ended
				}
				env.Note("store cut off for %v at Complete #%d, at call %d", s.CutFor, s.CutAtComplete, env.Issued())
				return nil
			})
		},
	}
}

// PGKillBackend terminates the store's own database sessions that are
// inside a transaction (pg_terminate_backend; only sessions whose
// application_name is the run's own), one every 10ms, in transactional mode:
// the claim, the business write and the commit are cut at random points
// (most terminated sessions are replays, whose read-only transaction already
// has its answer: they cost the caller nothing). A
// transaction cut before its commit leaves nothing (no record, no business
// row); executions are counted from committed business rows only.
func PGKillBackend() Scenario {
	return Scenario{
		Name:    "pg-kill-backend",
		About:   "pg_terminate_backend of sessions mid-transaction, transactional mode",
		Applies: only("pg-tx"),
		// The method takes 1ms after its business write, so that
		// terminations land between the write and the commit too.
		Configure: sessionKiller("pg-kill-backend", 10*time.Millisecond, time.Millisecond, "terminated %d sessions"),
	}
}

// sessionKiller is the Configure of a scenario that ends one of the store's
// own sessions (Handle.Terminate) every period while the storm runs; Pay's
// body takes afterEffect after its side effect. note reports the count.
func sessionKiller(name string, period, afterEffect time.Duration, note string) func(*Storm) {
	return func(s *Storm) {
		faulty(s)
		s.AfterEffect = afterEffect
		s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
			if env.Handle.Terminate == nil {
				return fmt.Errorf("%s: store %s cannot end its sessions", name, env.Backend)
			}
			killed := 0
			defer func() { env.Note(note, killed) }()
			t := time.NewTicker(period)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				n, err := env.Handle.Terminate(ctx, 1)
				if err != nil && ctx.Err() == nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				killed += n
			}
		})
	}
}

// MySQLKill kills the scenario's own MariaDB server mid-run (SIGKILL, at
// 15% of the calls, holding the first call that makes its side effect
// after that until the server is down, so that its Complete meets the
// outage; the storm holds at 60% until it is back), then starts it again on
// the same data directory and port: InnoDB's crash recovery keeps every
// committed transaction and rolls back the open ones. Calls fail with store
// errors during the outage (shorter than Pay's lease); nothing executes
// twice, and no record is left PROCESSING past its lease.
func MySQLKill() Scenario {
	return Scenario{
		Name:     "mysql-kill",
		About:    "MariaDB killed (SIGKILL) and started again mid-run (same data directory and port)",
		Applies:  only("mysql", "mysql-tx"),
		OwnMySQL: true,
		Configure: serverDown("mysql-kill", "killed", func(ctx context.Context, env *Env, outage time.Duration, down func()) error {
			return env.MySQL.KillCalling(ctx, outage, down)
		}),
	}
}

// MySQLKillConnection kills the store's own connections that are inside a
// transaction, or else running a statement (a replay's read: its caller
// gets a store error) (KILL CONNECTION; only sessions on the run's own
// database),
// one every 5ms, in transactional mode: the claim, the business write and
// the commit are cut at random points. A transaction cut before its commit
// leaves nothing (no record, no business row, its GET_LOCK locks released
// with the session); executions are counted from committed business rows
// only.
func MySQLKillConnection() Scenario {
	return Scenario{
		Name:    "mysql-kill-connection",
		About:   "KILL CONNECTION of sessions mid-transaction, transactional mode",
		Applies: only("mysql-tx"),
		// The method takes 5ms after its business write, so that kills
		// land between the write and the commit too.
		Configure: sessionKiller("mysql-kill-connection", 5*time.Millisecond, 5*time.Millisecond, "killed %d connections"),
	}
}
