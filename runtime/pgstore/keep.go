package pgstore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Nested final errors outlive an enclosing final error.
//
// A call that ends in a final error rolls back to its method's savepoint:
// its method's writes go, and so does everything stored under that
// savepoint by the calls nested in it. For a nested success that is right:
// its record without its writes would replay an effect that never
// committed. A nested final error holds no writes (its own discard removed
// them): its record is the whole of what it decided, and losing it would
// run an operation again that already answered for good (a declined
// charge, retried by another caller of the inner key, charged). So every
// level keeps the final records stored under it (keptFinal, passed up as
// each level completes), and a level that discards writes them again, in
// the same round trip as its rollback, under their keys' locks: each key's
// lock is taken once more at session level before the rollback (granted at
// once: the session holds it), so no other claim can take the key while
// the rollback has released its transaction-level lock; after the record is
// written again, the transaction-level lock is taken again and the session
// one released. A failure between the two leaves session locks behind: the
// connection is then closed rather than pooled (txn.mayHoldSessionLocks).

// keptFinal is a nested call's final record, stored in the enclosing
// transaction: what reapply needs to write it again.
type keptFinal struct {
	lock int64 // the key's advisory lock (keyLock)
	args []any // reapply's
}

// finalKept returns the record of a nested claim req completed with out, to
// keep, or false when out is not a final error.
func finalKept(req idem.ClaimRequest, out idem.Outcome, ttl time.Duration) (keptFinal, bool) {
	if out.Status != idem.StatusFailedFinal {
		return keptFinal{}, false
	}
	return keptFinal{lock: keyLock(req.Key), args: []any{req.Key.ID[:], int64(req.Token), []byte(req.Key.Tenant),
		[]byte(req.Key.Op), []byte(req.Key.Text), req.Fingerprint[:], int32(req.Scheme), int16(out.Status),
		out.Body, []byte(out.ErrCode), []byte(out.ErrMessage), out.Meta, micros(ttl)}}, true
}

// keeper is the list of final records stored under one open claim by the
// calls nested in it. Nested calls run one after the other, but may do so
// from different goroutines.
type keeper struct {
	mu   sync.Mutex
	kept []keptFinal
}

func (k *keeper) keep(f ...keptFinal) {
	k.mu.Lock()
	k.kept = append(k.kept, f...)
	k.mu.Unlock()
}

func (k *keeper) list() []keptFinal {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kept
}

const (
	// holdSQL takes each key's advisory lock at session level: it
	// outlives the rollback to the savepoint that follows.
	holdSQL = "SELECT count(pg_advisory_lock(k)) FROM unnest($1::bigint[]) k"
	// relockSQL takes each key's lock at transaction level again, held
	// until the transaction ends; unholdSQL then drops the session level.
	relockSQL = "SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::bigint[]) k"
	unholdSQL = "SELECT count(pg_advisory_unlock(k)) FROM unnest($1::bigint[]) k"
)

// queueDiscard queues the rollback to the method's savepoint of a claim
// whose method ended in a final error, and the rewrite of kept (the final
// records of the calls nested in it) around it. dirty is set while session
// locks may be held, and cleared when unholdSQL answered.
func queueDiscard(b *pgx.Batch, reapply string, kept []keptFinal, dirty *atomic.Bool) {
	if len(kept) == 0 {
		b.Queue(rollbackToSQL)
		return
	}
	locks := make([]int64, len(kept))
	for i, k := range kept {
		locks[i] = k.lock
	}
	dirty.Store(true)
	b.Queue(holdSQL, locks)
	b.Queue(rollbackToSQL)
	for _, k := range kept {
		b.Queue(reapply, k.args...)
	}
	b.Queue(relockSQL, locks)
	b.Queue(unholdSQL, locks).Exec(func(pgconn.CommandTag) error {
		dirty.Store(false)
		return nil
	})
}
