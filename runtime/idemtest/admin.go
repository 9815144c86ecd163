package idemtest

import (
	"errors"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The optional cases of idem.AdminStore (issue 25): each is skipped for a
// store that does not implement it. A store that keeps no operations or
// tenants (redisstore: its Entries' Key.Op is empty) answers a filter by
// them with errors.ErrUnsupported; the cases then check what it can filter.
var adminCases = []struct {
	name string
	fn   func(*suite, testing.TB)
}{
	{"AdminLookup", (*suite).adminLookup},
	{"AdminList", (*suite).adminList},
	{"AdminStats", (*suite).adminStats},
	{"AdminForget", (*suite).adminForget},
	{"AdminForgetRacesClaim", (*suite).adminForgetRacesClaim},
	{"AdminForgetRacesComplete", (*suite).adminForgetRacesComplete},
}

// admin returns the env's store as an idem.AdminStore, or skips.
func (e *env) admin() idem.AdminStore {
	a, ok := e.store.(idem.AdminStore)
	if !ok {
		e.t.Skipf("%T does not implement idem.AdminStore", e.store)
	}
	return a
}

func (s *suite) adminLookup(t testing.TB) {
	e := s.env(t)
	a := e.admin()
	k := e.key("lookup")
	_, err := a.Lookup(e.ctx, k)
	assertErrorIs(t, err, idem.ErrNotFound, "a key never claimed is not found")
	if err != nil {
		assertContains(t, err.Error(), k.Hex(), "the error names the key")
	}
	r := s.req(k, "p")
	r.Scheme = 7
	requireTrue(t, e.claim(r).Claimed)
	got, err := a.Lookup(e.ctx, k)
	requireNoError(t, err)
	assertEqual(t, idem.StatusProcessing, got.Status)
	assertEqual(t, r.Token, got.Token)
	assertEqual(t, r.Fingerprint, got.Fingerprint)
	assertEqual(t, uint32(7), got.Scheme)
	assertEqual(t, k.ID, got.Key.ID)
	assertGreater(t, got.LeaseLeft, 0, "a fresh claim's lease is live")
	assertFalse(t, got.Stuck())
	assertTrue(t, got.Expires.After(got.LeaseUntil) || got.Expires.Equal(got.LeaseUntil), "the lease ends no later than the record")
	if got.Key.Op != "" {
		assertEqual(t, k.Op, got.Key.Op)
		assertEqual(t, k.Tenant, got.Key.Tenant)
		assertTrue(t, !got.Created.IsZero() && got.Created.Before(got.Expires), "created before it expires")
	}
	// By the hex ID alone, as an operator types it.
	byHex, err := idem.KeyFromHex(k.Hex())
	requireNoError(t, err)
	again, err := a.Lookup(e.ctx, byHex)
	requireNoError(t, err)
	assertEqual(t, r.Token, again.Token)

	out := idem.Outcome{Status: idem.StatusFailedFinal, ErrCode: "Declined", ErrMessage: "card declined", Meta: []byte{1}}
	requireNoError(t, e.store.Complete(e.ctx, k, r.Token, out, 20*s.Unit))
	got, err = a.Lookup(e.ctx, k)
	requireNoError(t, err)
	assertEqual(t, idem.StatusFailedFinal, got.Status)
	assertEqual(t, "Declined", got.Outcome.ErrCode)
	assertEqual(t, "card declined", got.Outcome.ErrMessage)
	assertEqual(t, []byte{1}, got.Outcome.Meta)
	assertEqual(t, r.Token, got.Token, "a final record keeps the token that completed it")
	assertEqual(t, 0, int(got.LeaseLeft))
}

// collect pages through q until the end and returns the entries whose IDs
// are in want (keyed by ID); it fails on an entry seen twice.
func collect(t testing.TB, e *env, a idem.AdminStore, q idem.ListQuery, want map[[32]byte]string) map[[32]byte]idem.Entry {
	t.Helper()
	got := map[[32]byte]idem.Entry{}
	seen := map[[32]byte]bool{}
	for pages := 0; ; pages++ {
		requireLess(t, pages, 100000, "listing must end")
		p, err := a.List(e.ctx, q)
		requireNoError(t, err)
		assertLessOrEqual(t, len(p.Entries), q.PageLimit(), "a page holds at most its limit")
		for _, en := range p.Entries {
			// A store that keeps no operations lists in its own order
			// (redisstore: SCAN's), which may repeat a record.
			requireFalse(t, seen[en.Key.ID] && en.Key.Op != "", "entry %s listed twice", en.Key.Hex())
			seen[en.Key.ID] = true
			if _, ok := want[en.Key.ID]; ok {
				got[en.Key.ID] = en
			}
		}
		if p.Next == "" {
			return got
		}
		q.Cursor = p.Next
	}
}

// adminRecords makes, in e's tenant under op, the records the list and
// stats cases look for: two SUCCEEDED, one FAILED_FINAL, one PROCESSING
// whose lease lapsed (stuck) and one whose lease is live; it returns their
// IDs by name. It sleeps past the first leases on the store's clock.
func (s *suite) adminRecords(e *env, op string) map[string]idem.Key {
	keys := map[string]idem.Key{}
	claim := func(name string, lease bool) idem.ClaimRequest {
		k, err := idem.NewKey(e.tenant, op, name)
		requireNoError(e.t, err)
		keys[name] = k
		r := s.req(k, "p")
		if lease {
			r.Lease = 10 * s.Unit
		}
		requireTrue(e.t, e.claim(r).Claimed)
		s.sleep(s.Unit / 50) // created one after the other, even on a fake clock
		return r
	}
	for _, n := range []string{"ok1", "ok2"} {
		r := claim(n, false)
		requireNoError(e.t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded(n), 20*s.Unit))
	}
	r := claim("failed", false)
	requireNoError(e.t, e.store.Complete(e.ctx, r.Key, r.Token, idem.Outcome{Status: idem.StatusFailedFinal, ErrCode: "X"}, 20*s.Unit))
	claim("stuck", false)
	claim("live", true)
	s.sleep(s.Unit + s.Unit/2)
	return keys
}

func (s *suite) adminList(t testing.TB) {
	e := s.env(t)
	a := e.admin()
	op := "idemtest.List-" + e.tenant
	keys := s.adminRecords(e, op)
	want := map[[32]byte]string{}
	for n, k := range keys {
		want[k.ID] = n
	}
	names := func(m map[[32]byte]idem.Entry) map[string]bool {
		out := map[string]bool{}
		for id := range m {
			out[want[id]] = true
		}
		return out
	}
	full := idem.ListQuery{Op: op, ByTenant: true, Tenant: e.tenant, Limit: 2}
	if _, err := a.List(e.ctx, full); errors.Is(err, errors.ErrUnsupported) {
		full = idem.ListQuery{Limit: 2} // a store that keeps no operations
	}
	all := collect(t, e, a, full, want)
	assertEqual(t, map[string]bool{"ok1": true, "ok2": true, "failed": true, "stuck": true, "live": true}, names(all),
		"every live record, over pages of 2")
	assertTrue(t, all[keys["stuck"].ID].Stuck(), "a lapsed PROCESSING record is stuck")
	assertFalse(t, all[keys["live"].ID].Stuck())

	q := full
	q.Stuck = true
	assertEqual(t, map[string]bool{"stuck": true}, names(collect(t, e, a, q, want)), "stuck: PROCESSING past its lease")
	q = full
	q.Status = idem.StatusFailedFinal
	assertEqual(t, map[string]bool{"failed": true}, names(collect(t, e, a, q, want)))
	q = full
	q.Status = idem.StatusProcessing
	assertEqual(t, map[string]bool{"stuck": true, "live": true}, names(collect(t, e, a, q, want)))
	if full.Op == "" {
		return
	}
	// Newest first, by creation: the last two records created are the
	// first two listed.
	q = full
	p, err := a.List(e.ctx, q)
	requireNoError(t, err)
	requireEqual(t, 2, len(p.Entries))
	assertEqual(t, map[string]bool{"stuck": true, "live": true}, map[string]bool{want[p.Entries[0].Key.ID]: true, want[p.Entries[1].Key.ID]: true},
		"the newest first (created one after the other: stuck, live)")
	q = full
	q.MinAge = 1000 * s.Unit
	assertEqual(t, map[string]bool{}, names(collect(t, e, a, q, want)), "nothing is that old")
	q = full
	q.MaxAge = 1000 * s.Unit
	assertEqual(t, 5, len(collect(t, e, a, q, want)), "everything is that young")
	q = full
	q.Op = op + "-other"
	assertEqual(t, 0, len(collect(t, e, a, q, want)), "another operation's records only")
}

func (s *suite) adminStats(t testing.TB) {
	e := s.env(t)
	a := e.admin()
	op := "idemtest.Stats-" + e.tenant
	s.adminRecords(e, op)
	st, err := a.Stats(e.ctx, idem.StatsQuery{Op: op, ByTenant: true, Tenant: e.tenant})
	if errors.Is(err, errors.ErrUnsupported) {
		// A store that keeps no operations counts every record by status.
		st, err = a.Stats(e.ctx, idem.StatsQuery{})
		requireNoError(t, err)
		byStatus := map[idem.Stat]int64{}
		for _, x := range st {
			assertEqual(t, "", x.Op)
			byStatus[idem.Stat{Status: x.Status, Stuck: x.Stuck}] += x.Count
		}
		assertGreaterOrEqual(t, byStatus[idem.Stat{Status: idem.StatusSucceeded}], 2)
		assertGreaterOrEqual(t, byStatus[idem.Stat{Status: idem.StatusFailedFinal}], 1)
		assertGreaterOrEqual(t, byStatus[idem.Stat{Status: idem.StatusProcessing, Stuck: true}], 1)
		assertGreaterOrEqual(t, byStatus[idem.Stat{Status: idem.StatusProcessing}], 1)
		return
	}
	requireNoError(t, err)
	assertEqual(t, []idem.Stat{
		{Op: op, Status: idem.StatusProcessing, Count: 1},
		{Op: op, Status: idem.StatusProcessing, Stuck: true, Count: 1},
		{Op: op, Status: idem.StatusSucceeded, Count: 2},
		{Op: op, Status: idem.StatusFailedFinal, Count: 1},
	}, st)
}

func (s *suite) adminForget(t testing.TB) {
	e := s.env(t)
	a := e.admin()
	forget := func(k idem.Key, tok idem.Token, st idem.Status, force bool) error {
		return a.Forget(e.ctx, idem.ForgetRequest{Key: k, Token: tok, Status: st, Force: force, By: "idemtest"})
	}
	// A final record: forgotten, the next call runs again.
	done := s.req(e.key("done"), "p")
	requireTrue(t, e.claim(done).Claimed)
	requireNoError(t, e.store.Complete(e.ctx, done.Key, done.Token, succeeded("x"), 20*s.Unit))
	err := forget(done.Key, done.Token+1, idem.StatusSucceeded, true)
	assertErrorIs(t, err, idem.ErrRecordChanged, "another token: not the record looked at, even forced")
	if err != nil {
		assertContains(t, err.Error(), done.Key.Hex())
	}
	assertErrorIs(t, forget(done.Key, done.Token, idem.StatusProcessing, true), idem.ErrRecordChanged,
		"it completed since it was looked at PROCESSING: its outcome stays")
	requireNoError(t, forget(done.Key, done.Token, idem.StatusSucceeded, false))
	_, err = a.Lookup(e.ctx, done.Key)
	assertErrorIs(t, err, idem.ErrNotFound)
	assertErrorIs(t, forget(done.Key, done.Token, idem.StatusSucceeded, false), idem.ErrNotFound)
	assertTrue(t, e.claim(s.req(done.Key, "q")).Claimed, "a forgotten key runs again, whatever its payload")

	// A live lease: refused unless forced; the worker's Complete then fails.
	live := s.req(e.key("live"), "p")
	live.Lease = 10 * s.Unit
	requireTrue(t, e.claim(live).Claimed)
	assertErrorIs(t, forget(live.Key, live.Token, idem.StatusProcessing, false), idem.ErrLeaseLive)
	requireNoError(t, forget(live.Key, live.Token, idem.StatusProcessing, true))
	assertErrorIs(t, e.store.Complete(e.ctx, live.Key, live.Token, succeeded("late"), 20*s.Unit), idem.ErrLeaseLost,
		"the forced-out worker's outcome is not stored")

	// A lapsed lease (stuck): forgotten without force.
	stuck := s.req(e.key("stuck"), "p")
	requireTrue(t, e.claim(stuck).Claimed)
	s.sleep(s.Unit + s.Unit/2)
	requireNoError(t, forget(stuck.Key, stuck.Token, idem.StatusProcessing, false))
	assertTrue(t, e.claim(s.req(stuck.Key, "q")).Claimed)
}

// adminForgetRacesClaim: a stuck record; many goroutines take it over
// while an operator forgets the version they looked at. Whatever the order,
// exactly one claim wins, and the winner's record is never forgotten: its
// Complete succeeds and its outcome is what a lookup shows.
func (s *suite) adminForgetRacesClaim(t testing.TB) {
	e := s.env(t)
	a := e.admin()
	const rounds = 8
	looked := make([]idem.ClaimRequest, rounds)
	for i := range rounds {
		looked[i] = s.req(e.key("race", string(rune('a'+i))), "p")
		requireTrue(t, e.claim(looked[i]).Claimed)
	}
	s.sleep(s.Unit + s.Unit/2) // every lease lapses: stuck
	for i := range rounds {
		k := looked[i].Key
		n := max(s.Goroutines/4, 4)
		reqs := make([]idem.ClaimRequest, n)
		for j := range reqs {
			reqs[j] = s.req(k, "p")
			reqs[j].Lease = 20 * s.Unit
		}
		claimed := make([]bool, n)
		errs := make([]error, n+1)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j := range n {
			wg.Go(func() {
				<-start
				c, err := e.store.Claim(e.ctx, reqs[j])
				claimed[j], errs[j] = c.Claimed, err
			})
		}
		wg.Go(func() {
			<-start
			errs[n] = a.Forget(e.ctx, idem.ForgetRequest{Key: k, Token: looked[i].Token, Status: idem.StatusProcessing, Force: i%2 == 1, By: "idemtest"})
		})
		close(start)
		wg.Wait()
		for _, err := range errs[:n] {
			requireNoError(t, err)
		}
		if err := errs[n]; err != nil {
			assertErrorIs(t, err, idem.ErrRecordChanged, "a forget that lost the race finds another token")
		}
		winners := 0
		var w idem.ClaimRequest
		for j := range n {
			if claimed[j] {
				winners++
				w = reqs[j]
			}
		}
		requireEqual(t, 1, winners, "exactly one of the racing claims wins (round %d)", i)
		requireNoError(t, e.store.Complete(e.ctx, k, w.Token, succeeded("winner"), 20*s.Unit), "the winner's claim was not forgotten")
		got, err := a.Lookup(e.ctx, k)
		requireNoError(t, err)
		assertEqual(t, w.Token, got.Token)
		assertEqual(t, []byte("winner"), got.Outcome.Body)
	}
}

// adminForgetRacesComplete: a forced forget of the PROCESSING version races
// the worker's Complete: one of them wins, never both (an outcome stored and
// then forgotten would run the method again).
func (s *suite) adminForgetRacesComplete(t testing.TB) {
	e := s.env(t)
	a := e.admin()
	n := max(s.Goroutines/2, 8)
	reqs := make([]idem.ClaimRequest, n)
	for i := range reqs {
		reqs[i] = s.req(e.key("rc", string(rune('a'+i%26)), string(rune('a'+i/26))), "p")
		reqs[i].Lease = 20 * s.Unit
		requireTrue(t, e.claim(reqs[i]).Claimed)
	}
	completeErr := make([]error, n)
	forgetErr := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		r := reqs[i]
		wg.Go(func() {
			<-start
			completeErr[i] = e.store.Complete(e.ctx, r.Key, r.Token, succeeded("done"), 20*s.Unit)
		})
		wg.Go(func() {
			<-start
			forgetErr[i] = a.Forget(e.ctx, idem.ForgetRequest{Key: r.Key, Token: r.Token, Status: idem.StatusProcessing, Force: true, By: "idemtest"})
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		got, lerr := a.Lookup(e.ctx, reqs[i].Key)
		switch {
		case completeErr[i] == nil:
			assertErrorIs(t, forgetErr[i], idem.ErrRecordChanged, "the outcome was stored first: the forget must refuse")
			requireNoError(t, lerr)
			assertEqual(t, idem.StatusSucceeded, got.Status)
		default:
			assertErrorIs(t, completeErr[i], idem.ErrLeaseLost)
			assertNoError(t, forgetErr[i], "the forget won")
			assertErrorIs(t, lerr, idem.ErrNotFound)
		}
	}
}
