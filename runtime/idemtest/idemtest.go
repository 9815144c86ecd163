// Package idemtest is the conformance suite for idem.Store implementations.
// It depends on the standard library's testing package alone, so that a
// store's module inherits no assertion library from it.
//
// Every store in this module runs it, and a store of your own can too:
//
//	func TestConformance(t *testing.T) {
//		idemtest.Run(t, idemtest.Options{
//			NewStore: func(t *testing.T) idem.Store { return mystore.New(...) },
//		})
//	}
//
// The suite checks the Store contract (claim, complete, release, replay,
// conflict, expiry, lease takeover and fencing, and a race of many goroutines
// on one key), then the same guarantees end to end through idem.Do.
//
// It checks the store duties of ARCHITECTURE.md's rules 8 and 9 too:
//   - fields are bytes: tenants, operations, key parts, error codes and
//     messages, metadata and bodies with NUL bytes, invalid UTF-8 and every
//     byte value round-trip; the sizes idem.MaxTenantLen, idem.MaxOpLen and
//     idem.MaxOutcomeLen are accepted, and one byte more is refused with an
//     error wrapping idem.ErrTooLarge, with nothing written;
//   - every operation is idempotent for its caller's own token (a retry
//     after a lost reply): a repeated Claim is claimed and sets the lease
//     afresh from the store's now (never beyond the record's expiry), so a
//     retry that arrives after the lease lapsed is not taken over from
//     under it; a repeated Complete answers nil and keeps the first
//     outcome, a Release of an absent record answers nil; another token
//     gets idem.ErrLeaseLost; through idem.Do, lost and retried replies
//     leave the caller its success;
//   - every error an operation returns for a call it refuses (another
//     token, a final or absent record, a key over the size limits) wraps
//     its sentinel (idem.ErrLeaseLost, idem.ErrTooLarge) and names the key
//     by its hex ID (idem.Key.Hex): the ErrorsWrapSentinelAndNameKey case,
//     one subtest per operation and state;
//   - Record.Scheme round-trips;
//   - Renew (for stores implementing idem.Renewer) extends a lease from the
//     store's clock, never past the record's expiry, and is fenced;
//   - a bounded store (Options.NewBounded) refuses new claims with an error
//     wrapping idem.ErrStoreFull, never dropping a live record, and expired
//     records make room;
//   - Sweep (Options.Sweep) removes at most limit expired records and
//     returns how many;
//   - through idem.Do, a store whose server is down (Options.Down) or whose
//     schema was never migrated (Options.Unmigrated) runs no method, and
//     its error wraps idem.ErrStoreUnavailable (and idem.ErrStoreSchema,
//     naming Migrate, not retried), names the operation and the key's hex
//     ID once;
//   - through idem.Do, a transactional call whose database session ends
//     while its method runs (Options.BreakTx) did not happen, however the
//     method ends: no panic but the method's own, nothing stored, a retry
//     that runs once.
//
// CompleteThroughOutage, apart from Run, checks a store on a real server
// through an outage of its own making (a read-only database, a demoted
// master, a full disk): the store marks the server's answer as an outage,
// and the executor stores the outcome once it ends.
package idemtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Options configures Run.
type Options struct {
	// NewStore returns the store under test. It is called once per subtest;
	// the stores it returns may share one backend (a database, a Redis
	// server): every subtest uses keys of its own tenant.
	NewStore func(t *testing.T) idem.Store
	// Sleep advances the store's clock by d. Leave it nil for a store on a
	// real clock: the suite then sleeps, with leases of Unit.
	Sleep func(d time.Duration)
	// Unit is the lease the suite uses; TTLs are multiples of it. Default:
	// 1s with Sleep set, 150ms without (short enough to keep the suite
	// quick, long enough for a store round trip under -race).
	Unit time.Duration
	// Goroutines is how many goroutines race on one key (default 64).
	Goroutines int
	// Transactional says that NewStore returns an idem.TxStore whose claim
	// lives in a database transaction (pgstore.NewTx). Such a claim is
	// never taken over while its transaction is open, so the stalled-worker
	// case asserts that a duplicate is refused instead of taking over.
	Transactional bool
	// NewBounded returns a store that holds at most capacity live records
	// and refuses new claims beyond it with an error wrapping
	// idem.ErrStoreFull (memstore.WithMaxRecords), for one tenant: a store
	// with a tenant share turns it off here (memstore.WithTenantShare(0)).
	// Leave it nil for a store without a bound: the Capacity case is then
	// skipped.
	NewBounded func(t *testing.T, capacity int) idem.Store
	// Sweep removes at most limit expired records from store (a store
	// NewStore returned) and returns how many it removed: the one meaning
	// of every store's Sweep method, which is not part of idem.Store. Leave
	// it nil for a store that has none (Redis expires records itself): the
	// Sweep case is then skipped.
	Sweep func(ctx context.Context, store idem.Store, limit int) (int, error)
	// Down returns a store whose server is down (an address nothing
	// listens on): the DoStoreDown case checks, through idem.Do, that the
	// method does not run and that the error wraps idem.ErrStoreUnavailable,
	// names the operation and names the key's hex ID once. Leave it nil for
	// a store without a server (memstore): the case is then skipped.
	Down func(t *testing.T) idem.Store
	// Unmigrated returns a store on a database whose schema was never
	// migrated (SQL stores): the DoStoreUnmigrated case checks what
	// DoStoreDown does, and that the error wraps idem.ErrStoreSchema, names
	// Migrate and is not retried. Leave it nil for a store without a
	// schema: the case is then skipped.
	Unmigrated func(t *testing.T) idem.Store
	// BreakTx, for a Transactional store, ends the database session of
	// the transaction ctx carries (ctx is the method's context), as a
	// failover, a server restart or an operator's KILL would: the
	// DoTxSessionLost case calls it inside the method, ends the method in
	// each way a method can end (success, final error, transient error,
	// panic), and checks that the call did not happen: no panic but the
	// method's own, an error, nothing stored, a retry that runs once. Leave
	// it nil for a store whose transaction has no session to lose (an
	// in-process database): the case is then skipped.
	BreakTx func(ctx context.Context) error
}

type suite struct {
	Options
	tokens *atomic.Uint64   // shared by every attempt of a run
	slept  *atomic.Int64    // what this attempt slept, in nanoseconds
	wall   func() time.Time // the clock that judges real-clock attempts; nil: time.Now
}

// Run runs the conformance suite against the stores o.NewStore returns.
func Run(t *testing.T, o Options) {
	if o.NewStore == nil {
		t.Fatal("idemtest: Options.NewStore is nil")
	}
	if o.Unit == 0 {
		o.Unit = 150 * time.Millisecond
		if o.Sleep != nil {
			o.Unit = time.Second
		}
	}
	if o.Goroutines == 0 {
		o.Goroutines = 64
	}
	s := &suite{Options: o, tokens: new(atomic.Uint64), slept: new(atomic.Int64)}
	cases := []struct {
		name string
		fn   func(*suite, testing.TB)
	}{
		{"ClaimFreeKey", (*suite).claimFreeKey},
		{"ClaimHeldKey", (*suite).claimHeldKey},
		{"CompleteAndReplay", (*suite).completeAndReplay},
		{"FinalOutcome", (*suite).finalOutcome},
		{"OutcomeBytes", (*suite).outcomeBytes},
		{"Release", (*suite).release},
		{"Fencing", (*suite).fencing},
		{"CompleteTwice", (*suite).completeTwice},
		{"LeaseTakeover", (*suite).leaseTakeover},
		{"LapsedLeaseOtherPayload", (*suite).lapsedLeaseOtherPayload},
		{"Expiry", (*suite).expiry},
		{"ExpiredProcessing", (*suite).expiredProcessing},
		{"Scoping", (*suite).scoping},
		{"RaceOneKey", (*suite).raceOneKey},
		{"RaceManyKeys", (*suite).raceManyKeys},
		{"DoExactlyOnce", (*suite).doExactlyOnce},
		{"DoReplayAndConflict", (*suite).doReplayAndConflict},
		{"DoFinalAndTransient", (*suite).doFinalAndTransient},
		{"DoZombieFenced", (*suite).doZombieFenced},
		{"ByteSafeFields", (*suite).byteSafeFields},
		{"MaxSizes", (*suite).maxSizes},
		{"TooLarge", (*suite).tooLarge},
		{"ClaimTwiceSameToken", (*suite).claimTwiceSameToken},
		{"ClaimTwiceAfterLapse", (*suite).claimTwiceAfterLapse},
		{"ClaimAgainNeverBeyondExpiry", (*suite).claimAgainNeverBeyondExpiry},
		{"CompleteTwiceSameToken", (*suite).completeTwiceSameToken},
		{"ReleaseAbsent", (*suite).releaseAbsent},
		{"OtherToken", (*suite).otherToken},
		{"ErrorsWrapSentinelAndNameKey", (*suite).errorsWrapSentinelAndNameKey},
		{"Scheme", (*suite).scheme},
		{"Renew", (*suite).renew},
		{"RenewNeverBeyondExpiry", (*suite).renewNeverBeyondExpiry},
		{"RenewAfterTakeover", (*suite).renewAfterTakeover},
		{"Capacity", (*suite).capacity},
		{"Sweep", (*suite).sweep},
		{"DoLostRepliesRetried", (*suite).doLostRepliesRetried},
		{"DoLostCompleteReply", (*suite).doLostCompleteReply},
		{"DoStoreDown", (*suite).doStoreDown},
		{"DoStoreUnmigrated", (*suite).doStoreUnmigrated},
		{"DoTxSessionLost", (*suite).doTxSessionLost},         // sessionlost.go
		{"DoReplayKeepsOrigin", (*suite).doReplayKeepsOrigin}, // origin.go
	}
	cases = append(cases, adminCases...) // admin.go
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// MaxSizes runs alone, before the others resume: its 64 MiB
			// round trips can hold a single-threaded server (Redis) for
			// seconds, which would break the leases of cases running
			// beside it.
			if o.Sleep == nil && c.name != "MaxSizes" {
				t.Parallel()
			}
			s.runCase(t, c.fn)
		})
	}
}

// sleep lets d pass on the store's clock.
func (s *suite) sleep(d time.Duration) {
	if s.Sleep != nil {
		s.Sleep(d)
		return
	}
	s.slept.Add(int64(d))
	time.Sleep(d)
}

// env is one subtest's store and key space.
type env struct {
	t      testing.TB
	store  idem.Store
	tenant string
	ctx    context.Context
}

func (s *suite) env(t testing.TB) *env {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &env{t: t, store: s.NewStore(testingT(t)), tenant: "idemtest-" + hex.EncodeToString(b[:]), ctx: t.Context()}
}

func (e *env) key(parts ...string) idem.Key {
	k, err := idem.NewKey(e.tenant, "idemtest.Op", parts...)
	requireNoError(e.t, err)
	return k
}

func fp(s string) idem.Fingerprint {
	var f idem.Fingerprint
	copy(f[:], s)
	return f
}

// newToken returns a token no other request of this suite run carries.
func (s *suite) newToken() idem.Token { return idem.Token(s.tokens.Add(1)<<8 | 0x5a) }

func (s *suite) req(k idem.Key, f string) idem.ClaimRequest {
	return idem.ClaimRequest{Key: k, Fingerprint: fp(f), Token: s.newToken(), Lease: s.Unit, TTL: 20 * s.Unit}
}

func (e *env) claim(r idem.ClaimRequest) idem.Claim {
	e.t.Helper()
	c, err := e.store.Claim(e.ctx, r)
	requireNoError(e.t, err)
	return c
}

func succeeded(body string) idem.Outcome {
	return idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(body), Meta: []byte(`{"status":201}`)}
}

func (s *suite) claimFreeKey(t testing.TB) {
	e := s.env(t)
	c := e.claim(s.req(e.key("a"), "p"))
	assertTrue(t, c.Claimed, "a claim on a free key must succeed")
	assertFalse(t, c.TakenOver)
}

func (s *suite) claimHeldKey(t testing.TB) {
	e := s.env(t)
	first := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(first).Claimed)
	c := e.claim(s.req(e.key("a"), "p"))
	requireFalse(t, c.Claimed, "a held key must not be claimed twice")
	assertEqual(t, idem.StatusProcessing, c.Record.Status)
	assertEqual(t, first.Token, c.Record.Token, "the record keeps the holder's token")
	assertEqual(t, fp("p"), c.Record.Fingerprint)
	assertGreater(t, c.Record.LeaseLeft, time.Duration(0), "a live lease has time left")
	assertLessOrEqual(t, c.Record.LeaseLeft, s.Unit)
}

func (s *suite) completeAndReplay(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded(`{"id":7}`), 20*s.Unit))

	c := e.claim(s.req(e.key("a"), "p"))
	requireFalse(t, c.Claimed)
	assertEqual(t, idem.StatusSucceeded, c.Record.Status)
	assertEqual(t, []byte(`{"id":7}`), c.Record.Outcome.Body)
	assertEqual(t, []byte(`{"status":201}`), c.Record.Outcome.Meta)
	assertEqual(t, idem.StatusSucceeded, c.Record.Outcome.Status)
	assertEqual(t, time.Duration(0), c.Record.LeaseLeft, "a final record has no lease")

	other := e.claim(s.req(e.key("a"), "q"))
	requireFalse(t, other.Claimed, "another payload must not claim a completed key")
	assertEqual(t, fp("p"), other.Record.Fingerprint, "the stored fingerprint lets the caller see the conflict")
}

func (s *suite) finalOutcome(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	out := idem.Outcome{Status: idem.StatusFailedFinal, ErrCode: "ErrInsufficientFunds", ErrMessage: "pay: insufficient funds"}
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, out, 20*s.Unit))
	c := e.claim(s.req(e.key("a"), "p"))
	requireFalse(t, c.Claimed)
	assertEqual(t, idem.StatusFailedFinal, c.Record.Status)
	assertEqual(t, "ErrInsufficientFunds", c.Record.Outcome.ErrCode)
	assertEqual(t, "pay: insufficient funds", c.Record.Outcome.ErrMessage)
}

func (s *suite) outcomeBytes(t testing.TB) {
	e := s.env(t)
	big := make([]byte, 256<<10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for name, body := range map[string][]byte{"empty": nil, "binary": {0, 1, 0xff, 0, '"', '\\'}, "256KiB": big} {
		r := s.req(e.key(name), "p")
		requireTrue(t, e.claim(r).Claimed)
		requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: body}, 20*s.Unit))
		c := e.claim(s.req(e.key(name), "p"))
		requireFalse(t, c.Claimed)
		assertEqual(t, len(body), len(c.Record.Outcome.Body), name)
		assertTrue(t, string(body) == string(c.Record.Outcome.Body), "%s: body must round-trip byte for byte", name)
	}
}

func (s *suite) release(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	requireNoError(t, e.store.Release(e.ctx, r.Key, r.Token))
	c := e.claim(s.req(e.key("a"), "p"))
	assertTrue(t, c.Claimed, "a released key must be claimable at once")
	assertFalse(t, c.TakenOver)
}

func (s *suite) fencing(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	wrong := r.Token + 1
	assertErrorIs(t, e.store.Complete(e.ctx, r.Key, wrong, succeeded("x"), 20*s.Unit), idem.ErrLeaseLost)
	assertErrorIs(t, e.store.Release(e.ctx, r.Key, wrong), idem.ErrLeaseLost)
	c := e.claim(s.req(e.key("a"), "p"))
	requireFalse(t, c.Claimed, "a fenced-off call must not change the record")
	assertEqual(t, idem.StatusProcessing, c.Record.Status)
	assertEqual(t, r.Token, c.Record.Token)

	missing := e.key("never-claimed")
	assertErrorIs(t, e.store.Complete(e.ctx, missing, r.Token, succeeded("x"), 20*s.Unit), idem.ErrLeaseLost,
		"an outcome for a record that is not there is not stored")
}

func (s *suite) completeTwice(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("first"), 20*s.Unit))
	assertNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("second"), 20*s.Unit),
		"the token that completed the record is answered success again (a lost reply's retry)")
	assertErrorIs(t, e.store.Release(e.ctx, r.Key, r.Token), idem.ErrLeaseLost, "a completed record is never released")
	c := e.claim(s.req(e.key("a"), "p"))
	assertEqual(t, []byte("first"), c.Record.Outcome.Body, "a completed record is never overwritten")
	assertEqual(t, r.Token, c.Record.Token, "a completed record keeps the token that completed it")
}

func (s *suite) leaseTakeover(t testing.TB) {
	e := s.env(t)
	zombie := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(zombie).Claimed)
	s.sleep(s.Unit + s.Unit/2)

	heir := s.req(e.key("a"), "p")
	c := e.claim(heir)
	requireTrue(t, c.Claimed, "a lapsed lease must be taken over")
	assertTrue(t, c.TakenOver)

	assertErrorIs(t, e.store.Complete(e.ctx, zombie.Key, zombie.Token, succeeded("zombie"), 20*s.Unit), idem.ErrLeaseLost,
		"the zombie must not complete after a takeover")
	assertErrorIs(t, e.store.Release(e.ctx, zombie.Key, zombie.Token), idem.ErrLeaseLost,
		"the zombie must not release the heir's claim")
	requireNoError(t, e.store.Complete(e.ctx, heir.Key, heir.Token, succeeded("heir"), 20*s.Unit))
	r := e.claim(s.req(e.key("a"), "p"))
	requireFalse(t, r.Claimed)
	assertEqual(t, []byte("heir"), r.Record.Outcome.Body, "the stored outcome is the heir's")
}

func (s *suite) lapsedLeaseOtherPayload(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	s.sleep(s.Unit + s.Unit/2)
	c := e.claim(s.req(e.key("a"), "q"))
	assertFalse(t, c.Claimed, "a lapsed lease is taken over only by the same payload")
	assertEqual(t, fp("p"), c.Record.Fingerprint)
}

func (s *suite) expiry(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("old"), 2*s.Unit))
	c := e.claim(s.req(e.key("a"), "q"))
	requireFalse(t, c.Claimed, "a record inside its TTL is live")
	s.sleep(3 * s.Unit)
	c = e.claim(s.req(e.key("a"), "q"))
	assertTrue(t, c.Claimed, "a record past its TTL behaves as absent, whatever its payload")
	assertFalse(t, c.TakenOver)
}

func (s *suite) expiredProcessing(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	r.Lease, r.TTL = s.Unit, 2*s.Unit
	requireTrue(t, e.claim(r).Claimed)
	s.sleep(3 * s.Unit)
	c := e.claim(s.req(e.key("a"), "q"))
	assertTrue(t, c.Claimed, "an expired PROCESSING record behaves as absent")
	assertErrorIs(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("late"), 20*s.Unit), idem.ErrLeaseLost)
}

func (s *suite) scoping(t testing.TB) {
	e := s.env(t)
	k1, err := idem.NewKey(e.tenant+"-1", "idemtest.Op", "a")
	requireNoError(t, err)
	k2, err := idem.NewKey(e.tenant+"-2", "idemtest.Op", "a")
	requireNoError(t, err)
	k3, err := idem.NewKey(e.tenant+"-1", "idemtest.Other", "a")
	requireNoError(t, err)
	for _, k := range []idem.Key{k1, k2, k3} {
		assertTrue(t, e.claim(s.req(k, "p")).Claimed, "tenant and op scope a key: %s", k)
	}
}

func (s *suite) raceOneKey(t testing.TB) {
	e := s.env(t)
	k := e.key("race")
	var wins atomic.Int32
	var winner atomic.Uint64
	var wg sync.WaitGroup
	start := make(chan struct{})
	reqs := make([]idem.ClaimRequest, s.Goroutines)
	for i := range reqs {
		reqs[i] = s.req(k, "p")
		reqs[i].Lease = 20 * s.Unit
	}
	errs := make(chan error, s.Goroutines)
	seen := make([]idem.Token, s.Goroutines)
	for i := range s.Goroutines {
		wg.Go(func() {
			<-start
			c, err := e.store.Claim(e.ctx, reqs[i])
			if err != nil {
				errs <- err
				return
			}
			if c.Claimed {
				wins.Add(1)
				winner.Store(uint64(reqs[i].Token))
				return
			}
			seen[i] = c.Record.Token
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		requireNoError(t, err)
	}
	requireEqual(t, int32(1), wins.Load(), "exactly one of %d racing claims must win", s.Goroutines)
	for i, tok := range seen {
		if tok != 0 {
			assertEqual(t, idem.Token(winner.Load()), tok, "loser %d must see the winner's record", i)
		}
	}
}

func (s *suite) raceManyKeys(t testing.TB) {
	e := s.env(t)
	const keys = 8
	per := max(s.Goroutines/keys, 4)
	var wins [keys]atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	var failed atomic.Value
	for k := range keys {
		key := e.key("k", fmt.Sprint(k))
		for range per {
			r := s.req(key, "p")
			r.Lease = 20 * s.Unit
			wg.Go(func() {
				<-start
				c, err := e.store.Claim(e.ctx, r)
				if err != nil {
					failed.Store(err)
					return
				}
				if c.Claimed {
					wins[k].Add(1)
					if err := e.store.Complete(e.ctx, r.Key, r.Token, succeeded(fmt.Sprint(k)), 20*s.Unit); err != nil {
						failed.Store(err)
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		requireNoError(t, err)
	}
	for k := range keys {
		assertEqual(t, int32(1), wins[k].Load(), "key %d: exactly one claim", k)
	}
}

// Through idem.Do: the executor's guarantees on this store.

var testMethod = idem.Method{Op: "idemtest.Charge", TTL: time.Minute}

var errDeclined = errors.New("card declined")

func (s *suite) executor(e *env) *idem.Executor {
	return idem.NewExecutor(e.store, idem.WithTenant(func(context.Context) string { return e.tenant }), idem.WithLease(s.Unit))
}

func charge[T any](ctx context.Context, ex *idem.Executor, m *idem.Method, id, payload string, fn func(context.Context) (T, error)) (T, error) {
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.String(payload)
	return idem.Do(ctx, ex, m, &k, &h, fn)
}

func (s *suite) doExactlyOnce(t testing.TB) {
	e := s.env(t)
	ex := s.executor(e)
	m := testMethod
	m.Wait = 100 * s.Unit
	m.Lease = 50 * s.Unit
	m.TTL = max(m.TTL, m.Lease) // a Lease over the TTL is idem.ErrMisconfigured
	var runs atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]string, s.Goroutines)
	errs := make([]error, s.Goroutines)
	for i := range s.Goroutines {
		wg.Go(func() {
			<-start
			results[i], errs[i] = charge(e.ctx, ex, &m, "order-1", "100", func(context.Context) (string, error) {
				runs.Add(1)
				time.Sleep(s.Unit / 10)
				return "receipt-1", nil
			})
		})
	}
	close(start)
	wg.Wait()
	assertEqual(t, int32(1), runs.Load(), "%d concurrent duplicates must execute the method exactly once", s.Goroutines)
	for i := range results {
		if assertNoError(t, errs[i], "caller %d", i) {
			assertEqual(t, "receipt-1", results[i], "caller %d gets the first call's result", i)
		}
	}
}

func (s *suite) doReplayAndConflict(t testing.TB) {
	e := s.env(t)
	ex := s.executor(e)
	runs := 0
	fn := func(context.Context) (map[string]int, error) { runs++; return map[string]int{"amount": 100}, nil }
	first, err := charge(e.ctx, ex, &testMethod, "order-2", "100", fn)
	requireNoError(t, err)
	again, err := charge(e.ctx, ex, &testMethod, "order-2", "100", fn)
	requireNoError(t, err)
	assertEqual(t, first, again, "a retry gets the first result")
	assertEqual(t, 1, runs)
	_, err = charge(e.ctx, ex, &testMethod, "order-2", "999", fn)
	assertErrorIs(t, err, idem.ErrPayloadMismatch, "same key, other payload is a conflict")
	assertEqual(t, 1, runs)
}

func (s *suite) doFinalAndTransient(t testing.TB) {
	e := s.env(t)
	ex := s.executor(e)
	m := testMethod
	m.Final = []idem.FinalError{{Name: "errDeclined", Err: errDeclined}}
	runs := 0
	declined := func(context.Context) (int, error) { runs++; return 0, fmt.Errorf("charge: %w", errDeclined) }
	_, err := charge(e.ctx, ex, &m, "order-3", "100", declined)
	requireErrorIs(t, err, errDeclined)
	_, err = charge(e.ctx, ex, &m, "order-3", "100", declined)
	assertErrorIs(t, err, errDeclined, "a replayed final error is errors.Is-equal to its sentinel")
	assertErrorIs(t, err, idem.ErrFinal)
	assertEqual(t, "charge: card declined", err.Error())
	assertEqual(t, 1, runs, "a final error is replayed, not retried")

	runs = 0
	flaky := func(context.Context) (int, error) {
		runs++
		if runs == 1 {
			return 0, errors.New("connection reset")
		}
		return 42, nil
	}
	_, err = charge(e.ctx, ex, &m, "order-4", "100", flaky)
	requireError(t, err)
	v, err := charge(e.ctx, ex, &m, "order-4", "100", flaky)
	requireNoError(t, err, "a transient failure releases the key")
	assertEqual(t, 42, v)
	assertEqual(t, 2, runs)

	func() {
		defer func() { assertTrue(t, recover() != nil, "a panic is re-raised") }()
		_, _ = charge(e.ctx, ex, &m, "order-5", "100", func(context.Context) (int, error) { panic("boom") })
	}()
	v, err = charge(e.ctx, ex, &m, "order-5", "100", func(context.Context) (int, error) { return 5, nil })
	requireNoError(t, err, "a panic releases the key")
	assertEqual(t, 5, v)
}

func (s *suite) doZombieFenced(t testing.TB) {
	e := s.env(t)
	ex := s.executor(e)
	m := testMethod
	m.Lease = s.Unit
	stalled := make(chan struct{})
	resume := make(chan struct{})
	var resumeOnce sync.Once
	unblock := func() { resumeOnce.Do(func() { close(resume) }) }
	defer unblock() // never leave the stalled call (and its transaction) open
	var zombieV string
	var zombieErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		zombieV, zombieErr = charge(e.ctx, ex, &m, "order-6", "100", func(context.Context) (string, error) {
			close(stalled)
			<-resume
			return "zombie", nil
		})
	}()
	<-stalled
	s.sleep(s.Unit + s.Unit/2)
	v, err := charge(e.ctx, ex, &m, "order-6", "100", func(context.Context) (string, error) { return "heir", nil })
	if s.Transactional {
		// The stalled worker's claim is an open transaction: it cannot lapse,
		// so the duplicate is refused and the stalled worker's outcome stands.
		requireErrorIs(t, err, idem.ErrInProgress, "an open transaction is never taken over")
		unblock()
		<-done
		requireNoError(t, zombieErr)
		assertEqual(t, "zombie", zombieV)
		v, err = charge(e.ctx, ex, &m, "order-6", "100", func(context.Context) (string, error) { return "third", nil })
		requireNoError(t, err)
		assertEqual(t, "zombie", v, "the committed outcome is replayed")
		return
	}
	requireNoError(t, err, "a lapsed lease is taken over")
	assertEqual(t, "heir", v)
	unblock()
	<-done
	assertErrorIs(t, zombieErr, idem.ErrLeaseLost, "the stalled worker must not complete")
	v, err = charge(e.ctx, ex, &m, "order-6", "100", func(context.Context) (string, error) { return "third", nil })
	requireNoError(t, err)
	assertEqual(t, "heir", v, "the stored outcome is the heir's")
}
