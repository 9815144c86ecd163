package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// fakeClock is idemtest.FakeClock, starting at 2026-01-01 UTC.
type fakeClock = idemtest.FakeClock

func newFakeClock(auto bool) *fakeClock {
	return idemtest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), auto)
}

// errTransport is what a store answers when the network fails; whether the
// store applied the operation is unknown to the caller.
var errTransport = fmt.Errorf("read tcp 127.0.0.1:5432: %w", syscall.ECONNRESET)

// faultStore is a real memstore behind a link that can lose replies: an
// operation is applied and its reply replaced by errTransport (drop*), or it
// fails before reaching the store (fail*). It records every call.
type faultStore struct {
	*memstore.Store
	clock *fakeClock

	mu            sync.Mutex
	calls         []string
	claims        []idem.ClaimRequest
	completes     []idem.Outcome
	releases      []idem.Token
	dropClaim     int // replies of Claim to lose after applying it
	failClaim     int // Claims that fail without reaching the store
	dropComplete  int
	failComplete  int
	refuse        func(idem.Outcome) error // Complete refuses the outcome when it returns an error
	plan          map[int]fault            // faults by the index of the operation (from 0)
	ops           int                      // operations so far
	renewFault    error                    // what Renew answers instead of renewing, when set
	renewals      int
	renewalsAfter chan struct{} // closed and replaced on each Renew
}

// fault is what the link does to one operation.
type fault uint8

const (
	deliver   fault = iota
	dropReply       // the store applies the operation; its reply is lost
	failSend        // the operation never reaches the store
)

// next returns the fault planned for the next operation; f.mu is held.
func (f *faultStore) next() fault {
	n := f.ops
	f.ops++
	return f.plan[n]
}

func newFaultStore(clock *fakeClock) *faultStore {
	var st *memstore.Store
	if clock != nil {
		st = memstore.New(memstore.WithClock(clock.Now))
	} else {
		st = memstore.New()
	}
	return &faultStore{Store: st, clock: clock, renewalsAfter: make(chan struct{})}
}

func (f *faultStore) log(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *faultStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("claim %d", req.Token)
	f.claims = append(f.claims, req)
	plan := f.next()
	if f.failClaim > 0 || plan == failSend {
		f.failClaim = max(f.failClaim-1, 0)
		return idem.Claim{}, errTransport
	}
	claim, err := f.Store.Claim(ctx, req)
	if plan == dropReply {
		return idem.Claim{}, errTransport
	}
	if f.dropClaim > 0 && err == nil {
		f.dropClaim--
		return idem.Claim{}, errTransport
	}
	return claim, err
}

func (f *faultStore) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("complete %d %s %s", token, out.Status, out.ErrCode)
	f.completes = append(f.completes, out)
	plan := f.next()
	if f.failComplete > 0 || plan == failSend {
		f.failComplete = max(f.failComplete-1, 0)
		return errTransport
	}
	if f.refuse != nil {
		if err := f.refuse(out); err != nil {
			return err
		}
	}
	err := f.Store.Complete(ctx, key, token, out, ttl)
	if plan == dropReply {
		return errTransport
	}
	if f.dropComplete > 0 && err == nil {
		f.dropComplete--
		return errTransport
	}
	return err
}

func (f *faultStore) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("release %d", token)
	f.releases = append(f.releases, token)
	plan := f.next()
	if plan == failSend {
		return errTransport
	}
	err := f.Store.Release(ctx, key, token)
	if plan == dropReply {
		return errTransport
	}
	return err
}

// Renew is memstore's, unless renewFault is set.
func (f *faultStore) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log("renew %d %v", token, lease)
	defer func() {
		f.renewals++
		close(f.renewalsAfter)
		f.renewalsAfter = make(chan struct{})
	}()
	if f.renewFault != nil {
		return f.renewFault
	}
	return f.Store.Renew(ctx, key, token, lease)
}

// waitRenewals blocks until Renew was called n times in all.
func (f *faultStore) waitRenewals(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		f.mu.Lock()
		got, ch := f.renewals, f.renewalsAfter
		f.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%d renewals, want %d", got, n)
		}
	}
}

func (f *faultStore) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *faultStore) claimList() []idem.ClaimRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]idem.ClaimRequest(nil), f.claims...)
}

// txStore is an idem.TxStore over a faultStore: ClaimTx claims on it, and
// the Txn records how it ended (the business writes of a method are the
// writes slice, committed or discarded with the transaction).
type txStore struct {
	*faultStore
	mu     sync.Mutex
	ended  []string
	writes []string // committed business writes
}

type txn struct {
	st      *txStore
	key     idem.Key
	token   idem.Token
	pending []string
	done    bool
}

type txKey struct{}

func (s *txStore) ClaimTx(ctx context.Context, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, error) {
	claim, err := s.faultStore.Claim(ctx, req)
	if err != nil || !claim.Claimed {
		return claim, nil, err
	}
	return claim, &txn{st: s, key: req.Key, token: req.Token}, nil
}

func (t *txn) Context(ctx context.Context) context.Context { return context.WithValue(ctx, txKey{}, t) }

// write is a business write inside the transaction of ctx.
func write(ctx context.Context, s string) {
	t := ctx.Value(txKey{}).(*txn)
	t.pending = append(t.pending, s)
}

func (t *txn) end(how string) error {
	t.st.mu.Lock()
	defer t.st.mu.Unlock()
	if t.done {
		return errors.New("txn: already ended")
	}
	t.done = true
	t.st.ended = append(t.st.ended, how)
	return nil
}

func (t *txn) Complete(ctx context.Context, out idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if err := t.end(fmt.Sprintf("complete %s %s discard=%v", out.Status, out.ErrCode, discardWrites)); err != nil {
		return err
	}
	if err := t.st.faultStore.Complete(ctx, t.key, t.token, out, ttl); err != nil {
		_ = t.st.faultStore.Release(ctx, t.key, t.token) // the rollback drops the claim
		return err
	}
	if !discardWrites {
		t.st.mu.Lock()
		t.st.writes = append(t.st.writes, t.pending...)
		t.st.mu.Unlock()
	}
	return nil
}

func (t *txn) Release(ctx context.Context) error {
	if err := t.end("rollback"); err != nil {
		return err
	}
	return t.st.faultStore.Release(ctx, t.key, t.token)
}

func (s *txStore) endedList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ended...)
}

// eventLog records the observer's events with their errors.
type eventLog struct {
	mu  sync.Mutex
	evs []idem.Event
}

func (e *eventLog) observe(ev idem.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *eventLog) kinds() []idem.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ks []idem.EventKind
	for _, ev := range e.evs {
		ks = append(ks, ev.Kind)
	}
	return ks
}

func (e *eventLog) find(k idem.EventKind) (idem.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Kind == k {
			return ev, true
		}
	}
	return idem.Event{}, false
}
