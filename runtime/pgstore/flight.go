package pgstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// flights are the keys that a TxStore's ClaimTx calls are claiming or
// holding (their transaction is open), so that a duplicate in the same
// process is answered without a connection of the pool (see
// TxStore.ClaimTx).
type flights struct {
	mu sync.Mutex
	m  map[[32]byte]*flight
}

// flight is one key's ClaimTx that goes to the database (the leader), and,
// when it claimed the key, the transaction that holds it.
type flight struct {
	id     [32]byte
	fp     idem.Fingerprint
	scheme uint32
	// resolved is closed once the leader has its answer; the fields below
	// are set before.
	resolved chan struct{}
	// sent is set (under flights.mu) once the leader is about to send its
	// claim batch: a duplicate that joins later may have been called
	// after the database decided, so the leader's answer may be stale
	// for it (a final record that expired or was swept in between, a
	// holder elsewhere that has committed since) and it is not shared
	// with it.
	sent    bool
	claimed bool
	answer  idem.Claim // a record the leader was answered with (shared)
	shared  bool       // answer is a final record, valid for every payload
	busy    bool       // answer is "held elsewhere", for the leader's payload
	// done is closed when the flight ends: its claim answered without
	// claiming, or its transaction ended.
	done chan struct{}
}

// join returns the key's flight, whether the caller leads it (it goes to
// the database, and must call send, then hold or leave), and, for a
// duplicate, whether it joined after the leader sent its claim batch
// (late: see flight.sent).
func (fs *flights) join(req idem.ClaimRequest) (f *flight, leader, late bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.m[req.Key.ID]; ok {
		return f, false, f.sent
	}
	if fs.m == nil {
		fs.m = map[[32]byte]*flight{}
	}
	f = &flight{id: req.Key.ID, fp: req.Fingerprint, scheme: req.Scheme, resolved: make(chan struct{}), done: make(chan struct{})}
	fs.m[req.Key.ID] = f
	return f, true, false
}

// send marks that f's leader is about to send its claim batch: the
// duplicates that join from now on are late (see flight.sent).
func (fs *flights) send(f *flight) {
	fs.mu.Lock()
	f.sent = true
	fs.mu.Unlock()
}

// hold marks the leader's claim as granted: the flight lasts until end.
func (fs *flights) hold(f *flight) {
	f.claimed = true
	close(f.resolved)
}

// leave ends the flight of a leader that claimed nothing; with ok, c is
// its answer: a final record is shared with the duplicates that waited for
// it, a busy answer with those of the same payload that do not wait.
func (fs *flights) leave(f *flight, c idem.Claim, busy, ok bool) {
	if ok {
		f.answer = c
		f.shared = !busy && c.Record.Status != idem.StatusProcessing
		f.busy = busy
	}
	close(f.resolved)
	fs.end(f)
}

// end removes f, so that the next ClaimTx of its key leads a new flight,
// and wakes the duplicates that wait for it.
func (fs *flights) end(f *flight) {
	fs.mu.Lock()
	if fs.m[f.id] == f {
		delete(fs.m, f.id)
	}
	fs.mu.Unlock()
	close(f.done)
}

// follow answers a duplicate of f's key (req): when f's leader was
// answered with a decided record, that record; when f holds the key, a
// PROCESSING record of the holder's fingerprint and scheme, at once
// (deadline zero or passed) or once the deadline passes, or again (the
// caller claims anew) when the holder's transaction ended first. A late
// duplicate (it joined after the leader sent its batch) shares no answer
// but the key held by f (which still holds when it joined): when the
// leader claimed nothing, it claims anew once the flight has ended, under
// the next flight, whose batch is sent after its call. ctx bounds the
// wait.
func (f *flight) follow(ctx context.Context, req idem.ClaimRequest, deadline time.Time, late bool) (c idem.Claim, again bool, err error) {
	select {
	case <-f.resolved:
	case <-ctx.Done():
		return idem.Claim{}, false, ctx.Err()
	}
	if !f.claimed {
		switch {
		case late:
			select {
			case <-f.done:
				return idem.Claim{}, true, nil
			case <-ctx.Done():
				return idem.Claim{}, false, ctx.Err()
			}
		case f.shared:
			return f.answer, false, nil
		case f.busy && f.fp == req.Fingerprint && !time.Now().Before(deadline):
			return f.answer, false, nil
		}
		return idem.Claim{}, true, nil
	}
	processing := idem.Claim{Record: idem.Record{Status: idem.StatusProcessing, Fingerprint: f.fp, Scheme: f.scheme}}
	left := time.Until(deadline)
	if deadline.IsZero() || left <= 0 {
		return processing, false, nil
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-f.done:
		return idem.Claim{}, true, nil
	case <-t.C:
		return processing, false, nil
	case <-ctx.Done():
		return idem.Claim{}, false, ctx.Err()
	}
}

// parkIdle is how long a connection whose claim batch answered without
// claiming waits, with its transaction open, for the next ClaimTx of its
// store to commit that transaction in its own batch (see parking); after
// it, the transaction is committed on its own.
const parkIdle = 2 * time.Millisecond

// parking keeps connections whose claim batch answered a replay or a busy
// duplicate: their transaction, which wrote nothing and holds no key lock,
// is still open. The next ClaimTx of the store takes one instead of a
// connection of the pool and sends COMMIT first in its batch, so a replay
// costs one round trip on its connection, not two. A parked connection
// that no ClaimTx takes within parkIdle is committed and returned to the
// pool by a timer; at most max connections are parked.
type parking struct {
	mu    sync.Mutex
	conns []*parked
	max   int
	idle  time.Duration // parkIdle; longer in tests that count round trips
}

type parked struct {
	conn  *pgxpool.Conn
	timer *time.Timer
}

// park keeps conn, and reports false when there is no room (the caller
// then commits it).
func (p *parking) park(conn *pgxpool.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) >= p.max {
		return false
	}
	pc := &parked{conn: conn}
	pc.timer = time.AfterFunc(p.idle, func() { p.expire(pc) })
	p.conns = append(p.conns, pc)
	return true
}

// take returns a parked connection, or nil.
func (p *parking) take() *pgxpool.Conn {
	p.mu.Lock()
	n := len(p.conns)
	if n == 0 {
		p.mu.Unlock()
		return nil
	}
	pc := p.conns[n-1]
	p.conns[n-1] = nil
	p.conns = p.conns[:n-1]
	p.mu.Unlock()
	pc.timer.Stop() // if it fired, expire finds pc gone and does nothing
	return pc.conn
}

// expire commits and releases pc's connection unless a ClaimTx took it.
func (p *parking) expire(pc *parked) {
	p.mu.Lock()
	i := slices.Index(p.conns, pc)
	if i >= 0 {
		p.conns = slices.Delete(p.conns, i, i+1)
	}
	p.mu.Unlock()
	if i >= 0 {
		commitAndRelease(pc.conn)
	}
}

// commitAndRelease commits conn's transaction, which wrote nothing, and
// returns conn to the pool (which closes it if it is still in a
// transaction), on a context of its own bounded by settleTimeout.
func commitAndRelease(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	_, _ = conn.Exec(ctx, commitSQL)
	conn.Release()
}
