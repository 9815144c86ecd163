// Package stress is the duplicate storm with faults: it drives the generated
// wrapper of its own service (stormsvc.NewIdempotentService, Pay and
// HandleShipment) with many workers over many keys, every key retried
// several times concurrently, and checks that idempotency holds when things
// break. Tests run a scenario through stresstest.RunScenario.
//
// A run (Run) is one Scenario on one Backend (a func that opens an
// idem.Store). The store is wrapped in a Tweak (shorter leases and TTLs for
// chosen keys) over a Recorder, which records every Claim, Complete and
// Release with its inputs, outputs, call and return instants. After the
// storm the run asserts:
//
//   - executions per key, counted by an independent Ledger (Debit calls per
//     order), are at most 1, except where the scenario documents a limit
//     (a stall after the side effect executes twice in lease mode);
//   - every call got its result (all results of a key are the same receipt,
//     for the call's own amount) or a documented error for its key's class
//     (ErrPayloadMismatch, ErrInProgress, the transient and final errors,
//     ErrLeaseLost for a fenced zombie, store errors in fault scenarios);
//   - no record is left PROCESSING: a probe claims every key with its
//     payload and a fresh token, waits out a live lease once, and must find
//     a final record or a free key;
//   - the recorded history is linearizable (porcupine) against Model, a
//     sequential model of the Store contract, partitioned by key, in which
//     only time is nondeterministic (when a lease lapses, when a record
//     expires), bounded by the recorded instants; each key is checked on
//     its own within StepBudget steps of the model (the same on every
//     machine: a slow one does not fail a correct history), first without
//     the operations of unknown effect that no answer shows (Check).
//
// Fault scenarios (faults.go) kill redis-server and restart it on the same
// port (redis-kill), delete Redis records after their first outcome
// (redis-lose-key), restart PostgreSQL with a fast shutdown (pg-restart), and
// terminate sessions mid-transaction in transactional mode (pg-kill-backend,
// on the pg-tx backend, whose executions are the committed rows of a
// business table written through pgstore.TxFrom), kill MariaDB (SIGKILL)
// and start it again (mysql-kill, on mysql and mysql-tx: package
// mysqlstress), and kill connections mid-transaction in transactional mode
// (mysql-kill-connection, on mysql-tx, whose executions are the committed
// rows of a business table written through mysqlstore.TxFrom). A scenario
// that kills or restarts a server runs on one the harness started itself
// (StartRedis, StartPG, StartMySQL); it never signals a process it did not start. Where a store
// documents a limit, the extra executions are allowed and reported by
// limit: plain Redis losing records (the model then lets records vanish),
// a stall after the side effect in lease mode (stall-after-effect), and
// LimitOutage, in the words of the user documents: "In lease mode, a store
// outage longer than the lease after the method ran can run it again;
// transactional mode cannot." (complete-store-error: only for keys whose
// Complete the executor's observer reported as a store_error, and only
// when a fault left the store unreachable for at least the key's lease;
// the injectors record each outage (Env.Outage), and the leases come from
// the recorded claims). A store-outage scenario cuts every store call off
// for less than the lease, on every lease-mode store, starting at a chosen
// Complete (Storm.CutAtComplete: it is met on every run, not by chance);
// store-readonly does the same with a store that answers as a read-only
// database does (an error that can pass, idem.ErrStoreOutage): nothing may
// execute twice there.
//
// Result.Line is the one-line summary; internal/cmd/stress prints one per
// scenario and store.
package stress
