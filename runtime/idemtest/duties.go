package idemtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The store duties of rules 8 and 9 (ARCHITECTURE.md, "Rules the runtime
// keeps"): byte-safe fields within the documented sizes, operations that are
// idempotent for their caller's own token, the fingerprint scheme kept with
// the record, lease renewal, bounded capacity and one meaning of Sweep.

// hostile are byte strings no store may refuse or alter: NUL bytes, invalid
// UTF-8 and every byte value.
var hostile = []struct{ name, v string }{
	{"nul", "a\x00b"},
	{"only-nul", "\x00"},
	{"invalid-utf8", "\xff\xfe\xc3(\xed\xa0\x80"},
	{"all-bytes", allBytes(1)},
}

// allBytes returns every byte value 0..255, n times over.
func allBytes(n int) string {
	b := make([]byte, 0, 256*n)
	for range n {
		for i := range 256 {
			b = append(b, byte(i))
		}
	}
	return string(b)
}

// pattern returns n bytes: every byte value, then a random block of 64 KiB
// repeated (filled by doubling copies, which are fast under the race
// detector too). Random bytes do not compress, so a database that
// compresses large values (PostgreSQL's TOAST) gives up at once instead of
// spending seconds on a 64 MiB value.
func pattern(n int) []byte {
	b := make([]byte, n)
	unit := min(n, 64<<10)
	_, _ = rand.Read(b[:unit])
	for i := range min(n, 256) {
		b[i] = byte(i)
	}
	for filled := unit; filled < n; filled *= 2 {
		copy(b[filled:], b[:filled])
	}
	return b
}

func (e *env) keyIn(tenant, op string, parts ...string) idem.Key {
	e.t.Helper()
	k, err := idem.NewKey(tenant, op, parts...)
	requireNoError(e.t, err)
	return k
}

// byteSafeFields: tenants, operations, key parts, error codes and messages,
// metadata and bodies are bytes, stored and returned byte for byte.
func (s *suite) byteSafeFields(t testing.TB) {
	e := s.env(t)
	for _, h := range hostile {
		k := e.keyIn(e.tenant+h.v, "idemtest.Op"+h.v, h.v, "part"+h.v)
		r := s.req(k, "p")
		c, err := e.store.Claim(e.ctx, r)
		requireNoError(t, err, "%s: a claim must take any bytes", h.name)
		requireTrue(t, c.Claimed, h.name)
		final := idem.Outcome{Status: idem.StatusFailedFinal, ErrCode: h.v, ErrMessage: "pay: " + h.v, Meta: []byte(h.v)}
		requireNoError(t, e.store.Complete(e.ctx, k, r.Token, final, 20*s.Unit), "%s: an error message is bytes", h.name)
		got := e.claim(s.req(k, "p"))
		requireFalse(t, got.Claimed, h.name)
		assertEqual(t, idem.StatusFailedFinal, got.Record.Status, h.name)
		assertTrue(t, got.Record.Outcome.ErrCode == h.v, "%s: error code must round-trip byte for byte: %q", h.name, got.Record.Outcome.ErrCode)
		assertTrue(t, got.Record.Outcome.ErrMessage == "pay: "+h.v, "%s: error message must round-trip byte for byte: %q", h.name, got.Record.Outcome.ErrMessage)
		assertTrue(t, bytes.Equal(got.Record.Outcome.Meta, []byte(h.v)), "%s: meta must round-trip byte for byte: %q", h.name, got.Record.Outcome.Meta)

		k2 := e.keyIn(e.tenant+h.v, "idemtest.Op"+h.v, "ok"+h.v)
		r2 := s.req(k2, "p")
		requireTrue(t, e.claim(r2).Claimed, h.name)
		ok := idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(h.v), Meta: []byte(h.v + h.v)}
		requireNoError(t, e.store.Complete(e.ctx, k2, r2.Token, ok, 20*s.Unit), h.name)
		got = e.claim(s.req(k2, "p"))
		requireFalse(t, got.Claimed, h.name)
		assertTrue(t, bytes.Equal(got.Record.Outcome.Body, []byte(h.v)), "%s: body must round-trip byte for byte", h.name)
		assertTrue(t, bytes.Equal(got.Record.Outcome.Meta, []byte(h.v+h.v)), "%s: meta must round-trip byte for byte", h.name)

		// Another tenant or operation that differs only in these bytes is
		// another record.
		for _, other := range []idem.Key{
			e.keyIn(e.tenant+strings.ReplaceAll(h.v, "\x00", ""), "idemtest.Op"+h.v, h.v, "part"+h.v),
			e.keyIn(e.tenant+h.v, "idemtest.Op", h.v, "part"+h.v),
		} {
			if other.ID == k.ID {
				continue
			}
			assertTrue(t, e.claim(s.req(other, "p")).Claimed, "%s: another tenant or op is another record", h.name)
		}
	}
}

// maxSizes: a tenant of MaxTenantLen bytes, an op of MaxOpLen bytes and an
// outcome of MaxOutcomeLen bytes are accepted and returned intact.
func (s *suite) maxSizes(t testing.TB) {
	e := s.env(t)
	tenant := e.tenant + allBytes(8)[:idem.MaxTenantLen-len(e.tenant)]
	op := allBytes(8)[:idem.MaxOpLen]
	requireEqual(t, idem.MaxTenantLen, len(tenant))
	k := e.keyIn(tenant, op, "max")
	r := s.req(k, "p")
	r.Lease, r.TTL = 400*s.Unit, 400*s.Unit // a 64 MiB round trip may be slow
	c, err := e.store.Claim(e.ctx, r)
	requireNoError(t, err, "a tenant of MaxTenantLen and an op of MaxOpLen bytes must be accepted")
	requireTrue(t, c.Claimed)

	meta := pattern(4096)
	body := pattern(idem.MaxOutcomeLen - len(meta))
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: body, Meta: meta}
	requireNoError(t, e.store.Complete(e.ctx, k, r.Token, out, 400*s.Unit), "an outcome of MaxOutcomeLen bytes must be accepted")
	got := e.claim(s.req(k, "p"))
	requireFalse(t, got.Claimed)
	assertEqual(t, len(body), len(got.Record.Outcome.Body))
	assertTrue(t, bytes.Equal(body, got.Record.Outcome.Body), "a body of maximum size must round-trip")
	assertTrue(t, bytes.Equal(meta, got.Record.Outcome.Meta), "meta must round-trip")

	// A final error with a long code and a long message of random bytes (1
	// MiB: one 64 MiB round trip is enough to check the total, and costs
	// seconds on a database).
	k2 := e.keyIn(tenant, op, "max-final")
	r2 := s.req(k2, "p")
	r2.Lease, r2.TTL = 400*s.Unit, 400*s.Unit
	requireTrue(t, e.claim(r2).Claimed)
	code := string(pattern(1024))
	msg := string(body[:1<<20])
	final := idem.Outcome{Status: idem.StatusFailedFinal, ErrCode: code, ErrMessage: msg, Meta: meta}
	requireNoError(t, e.store.Complete(e.ctx, k2, r2.Token, final, 400*s.Unit), "a long final error must be accepted")
	got = e.claim(s.req(k2, "p"))
	requireFalse(t, got.Claimed)
	assertTrue(t, got.Record.Outcome.ErrCode == code, "a long error code must round-trip")
	assertEqual(t, len(msg), len(got.Record.Outcome.ErrMessage))
	assertTrue(t, got.Record.Outcome.ErrMessage == msg, "a long error message must round-trip")
}

// tooLarge: a tenant, op or outcome over the limits is refused with an error
// wrapping idem.ErrTooLarge, and nothing is written.
func (s *suite) tooLarge(t testing.TB) {
	e := s.env(t)
	for _, tc := range []struct {
		name string
		edit func(*idem.Key)
	}{
		{"tenant", func(k *idem.Key) { k.Tenant = allBytes(8)[:idem.MaxTenantLen+1] }},
		{"op", func(k *idem.Key) { k.Op = allBytes(8)[:idem.MaxOpLen+1] }},
	} {
		// Key.ID stays the one of a small key, so the test can look at the
		// record the refused claim would have written.
		k := e.key("too-large", tc.name)
		big := k
		tc.edit(&big)
		_, err := e.store.Claim(e.ctx, s.req(big, "p"))
		requireErrorIs(t, err, idem.ErrTooLarge, "%s over its limit must be refused", tc.name)
		c := e.claim(s.req(k, "q"))
		assertTrue(t, c.Claimed, "%s: a refused claim writes nothing", tc.name)
		assertFalse(t, c.TakenOver, tc.name)
	}

	r := s.req(e.key("too-large-outcome"), "p")
	r.Lease, r.TTL = 400*s.Unit, 400*s.Unit
	requireTrue(t, e.claim(r).Claimed)
	huge := pattern(idem.MaxOutcomeLen + 1)
	half := idem.MaxOutcomeLen / 2
	for name, out := range map[string]idem.Outcome{
		"body":          {Status: idem.StatusSucceeded, Body: huge},
		"message":       {Status: idem.StatusFailedFinal, ErrMessage: string(huge)},
		"body-and-meta": {Status: idem.StatusSucceeded, Body: huge[:half], Meta: huge[:idem.MaxOutcomeLen-half+1]},
		"code-and-meta": {Status: idem.StatusFailedFinal, ErrCode: "E", Meta: huge[:idem.MaxOutcomeLen]},
	} {
		err := e.store.Complete(e.ctx, r.Key, r.Token, out, 400*s.Unit)
		requireErrorIs(t, err, idem.ErrTooLarge, "%s: an outcome over MaxOutcomeLen must be refused", name)
		c := e.claim(s.req(r.Key, "p"))
		requireFalse(t, c.Claimed)
		assertEqual(t, idem.StatusProcessing, c.Record.Status, "%s: a refused outcome writes nothing", name)
		assertEqual(t, r.Token, c.Record.Token, name)
	}
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("small"), 20*s.Unit),
		"the claim still holds after refused outcomes")
}

// claimTwiceSameToken: a claim repeated with its own token (a lost reply's
// retry) is claimed again, and there is still one record.
func (s *suite) claimTwiceSameToken(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	r.Scheme = 3
	requireTrue(t, e.claim(r).Claimed)
	again := e.claim(r)
	assertTrue(t, again.Claimed, "the same claim repeated by its own token is claimed, as the original was")

	other := e.claim(s.req(e.key("a"), "p"))
	requireFalse(t, other.Claimed, "the repeated claim made no second record")
	assertEqual(t, idem.StatusProcessing, other.Record.Status)
	assertEqual(t, r.Token, other.Record.Token)
	assertEqual(t, uint32(3), other.Record.Scheme)

	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("one"), 20*s.Unit))
	again = e.claim(r)
	assertFalse(t, again.Claimed, "a claim repeated after the outcome is stored gets the outcome")
	assertEqual(t, []byte("one"), again.Record.Outcome.Body)
}

// claimTwiceAfterLapse: a claim repeated by its own token after its lease
// lapsed (its first replies were lost, and nobody took the key over) is
// claimed with a fresh lease, so that the method it now starts is not
// taken over from under it: a takeover right after fails.
func (s *suite) claimTwiceAfterLapse(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	s.sleep(s.Unit + s.Unit/2)
	again := e.claim(r)
	requireTrue(t, again.Claimed, "the holder's repeated claim is claimed, as the original was")
	assertFalse(t, again.TakenOver, "the holder took nothing over")

	other := e.claim(s.req(r.Key, "p"))
	requireFalse(t, other.Claimed, "the repeated claim set the lease afresh: no takeover right after it")
	assertEqual(t, r.Token, other.Record.Token)
	assertGreater(t, other.Record.LeaseLeft, time.Duration(0), "the fresh lease has time left")
	assertLessOrEqual(t, other.Record.LeaseLeft, s.Unit, "the fresh lease runs from the store's now")
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("renewed by claim"), 20*s.Unit),
		"the holder still holds the record")
}

// claimAgainNeverBeyondExpiry: a repeated claim's fresh lease ends at the
// latest with the record.
func (s *suite) claimAgainNeverBeyondExpiry(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	r.Lease, r.TTL = s.Unit, 10*s.Unit
	requireTrue(t, e.claim(r).Claimed)
	s.sleep(2 * s.Unit)
	r.Lease = r.TTL // a retry asks for more than the record has left
	requireTrue(t, e.claim(r).Claimed)
	c := e.claim(s.req(r.Key, "p"))
	requireFalse(t, c.Claimed)
	assertEqual(t, r.Token, c.Record.Token)
	assertLessOrEqual(t, c.Record.LeaseLeft, 8*s.Unit, "the lease ends at the latest with the record")
	s.sleep(8*s.Unit + s.Unit/2)
	c = e.claim(s.req(r.Key, "q"))
	assertTrue(t, c.Claimed, "the record expired on time despite the repeated claim")
}

// completeTwiceSameToken: a final error or a success stored twice by the
// same token answers success both times and keeps the first outcome.
func (s *suite) completeTwiceSameToken(t testing.TB) {
	e := s.env(t)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	out := idem.Outcome{Status: idem.StatusFailedFinal, ErrCode: "ErrDeclined", ErrMessage: "declined"}
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, out, 20*s.Unit))
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, out, 20*s.Unit), "the same Complete repeated is the same success")
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("other"), 20*s.Unit),
		"the token that decided the record is answered success, whatever it sends again")
	c := e.claim(s.req(e.key("a"), "p"))
	requireFalse(t, c.Claimed)
	assertEqual(t, idem.StatusFailedFinal, c.Record.Status, "the first outcome stands")
	assertEqual(t, "declined", c.Record.Outcome.ErrMessage)
}

// releaseAbsent: releasing a record that is not there is a success (the
// release already happened, or the record expired).
func (s *suite) releaseAbsent(t testing.TB) {
	e := s.env(t)
	tok := s.newToken()
	assertNoError(t, e.store.Release(e.ctx, e.key("never-claimed"), tok), "releasing an absent record is a success")
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	requireNoError(t, e.store.Release(e.ctx, r.Key, r.Token))
	assertNoError(t, e.store.Release(e.ctx, r.Key, r.Token), "the same Release repeated is the same success")
	c := e.claim(s.req(e.key("a"), "p"))
	assertTrue(t, c.Claimed)
	assertFalse(t, c.TakenOver)

	x := s.req(e.key("expires"), "p")
	x.Lease, x.TTL = s.Unit, 2*s.Unit
	requireTrue(t, e.claim(x).Claimed)
	s.sleep(3 * s.Unit)
	assertNoError(t, e.store.Release(e.ctx, x.Key, x.Token), "releasing an expired record is a success")
}

// otherToken: Complete, Release and Renew by a token that does not hold the
// record answer ErrLeaseLost and change nothing.
func (s *suite) otherToken(t testing.TB) {
	e := s.env(t)
	renewer, canRenew := e.store.(idem.Renewer)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	wrong := s.newToken()
	assertErrorIs(t, e.store.Complete(e.ctx, r.Key, wrong, succeeded("x"), 20*s.Unit), idem.ErrLeaseLost)
	assertErrorIs(t, e.store.Release(e.ctx, r.Key, wrong), idem.ErrLeaseLost)
	if canRenew {
		assertErrorIs(t, renewer.Renew(e.ctx, r.Key, wrong, 10*s.Unit), idem.ErrLeaseLost)
	}
	c := e.claim(s.req(r.Key, "p"))
	requireFalse(t, c.Claimed)
	assertEqual(t, idem.StatusProcessing, c.Record.Status)
	assertEqual(t, r.Token, c.Record.Token)
	assertLessOrEqual(t, c.Record.LeaseLeft, s.Unit, "another token's Renew did not extend the lease")

	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("mine"), 20*s.Unit))
	assertErrorIs(t, e.store.Complete(e.ctx, r.Key, wrong, succeeded("x"), 20*s.Unit), idem.ErrLeaseLost,
		"a final record of another token is not this token's success")
	assertErrorIs(t, e.store.Release(e.ctx, r.Key, wrong), idem.ErrLeaseLost)
	if canRenew {
		assertErrorIs(t, renewer.Renew(e.ctx, r.Key, wrong, 10*s.Unit), idem.ErrLeaseLost)
		assertErrorIs(t, renewer.Renew(e.ctx, r.Key, r.Token, 10*s.Unit), idem.ErrLeaseLost, "a final record has no lease to renew")
	}
	c = e.claim(s.req(r.Key, "p"))
	requireFalse(t, c.Claimed)
	assertEqual(t, []byte("mine"), c.Record.Outcome.Body)
}

// errorsWrapSentinelAndNameKey: every error a store operation returns for
// a call it refuses (another token's, a final record's, an absent
// record's, a key over the size limits) wraps its sentinel, so that
// errors.Is tells the caller what happened, and names the key by its hex
// ID (idem.Key.Hex), once, so that a log line says which record it is
// about (a store wrapping another's error does not repeat it). One subtest
// per operation and state.
func (s *suite) errorsWrapSentinelAndNameKey(t testing.TB) {
	e := s.env(t)
	held, done := s.req(e.key("held"), "p"), s.req(e.key("done"), "p")
	requireTrue(t, e.claim(held).Claimed)
	requireTrue(t, e.claim(done).Claimed)
	requireNoError(t, e.store.Complete(e.ctx, done.Key, done.Token, succeeded("done"), 20*s.Unit))
	absent, wrong := e.key("absent"), s.newToken()
	longTenant, longOp := held.Key, held.Key
	longTenant.Tenant = strings.Repeat("t", idem.MaxTenantLen+1)
	longOp.Op = strings.Repeat("o", idem.MaxOpLen+1)
	complete := func(k idem.Key, tok idem.Token) func() error {
		return func() error { return e.store.Complete(e.ctx, k, tok, succeeded("x"), 20*s.Unit) }
	}
	release := func(k idem.Key, tok idem.Token) func() error {
		return func() error { return e.store.Release(e.ctx, k, tok) }
	}
	claim := func(k idem.Key) func() error {
		return func() error { _, err := e.store.Claim(e.ctx, s.req(k, "p")); return err }
	}
	cases := []struct {
		name     string
		key      idem.Key
		sentinel error
		call     func() error
	}{
		{"Complete/ProcessingOtherToken", held.Key, idem.ErrLeaseLost, complete(held.Key, wrong)},
		{"Release/ProcessingOtherToken", held.Key, idem.ErrLeaseLost, release(held.Key, wrong)},
		{"Complete/FinalOtherToken", done.Key, idem.ErrLeaseLost, complete(done.Key, wrong)},
		{"Release/FinalOtherToken", done.Key, idem.ErrLeaseLost, release(done.Key, wrong)},
		{"Release/FinalOwnToken", done.Key, idem.ErrLeaseLost, release(done.Key, done.Token)},
		{"Complete/Absent", absent, idem.ErrLeaseLost, complete(absent, wrong)},
		{"Claim/TenantTooLarge", longTenant, idem.ErrTooLarge, claim(longTenant)},
		{"Claim/OpTooLarge", longOp, idem.ErrTooLarge, claim(longOp)},
	}
	if rn, ok := e.store.(idem.Renewer); ok {
		renew := func(k idem.Key, tok idem.Token) func() error {
			return func() error { return rn.Renew(e.ctx, k, tok, 10*s.Unit) }
		}
		cases = append(cases, []struct {
			name     string
			key      idem.Key
			sentinel error
			call     func() error
		}{
			{"Renew/ProcessingOtherToken", held.Key, idem.ErrLeaseLost, renew(held.Key, wrong)},
			{"Renew/FinalOtherToken", done.Key, idem.ErrLeaseLost, renew(done.Key, wrong)},
			{"Renew/FinalOwnToken", done.Key, idem.ErrLeaseLost, renew(done.Key, done.Token)},
			{"Renew/Absent", absent, idem.ErrLeaseLost, renew(absent, wrong)},
		}...)
	}
	for _, c := range cases {
		testingT(t).Run(c.name, func(t *testing.T) {
			err := c.call()
			requireErrorIs(t, err, c.sentinel)
			assertContains(t, err.Error(), c.key.Hex(), "the error names the key's hex ID")
			assertEqual(t, 1, strings.Count(err.Error(), c.key.Hex()), "the error names the key's hex ID once: %v", err)
		})
	}
}

// scheme: Record.Scheme is the scheme of the claim that created the record,
// on PROCESSING and final records.
func (s *suite) scheme(t testing.TB) {
	e := s.env(t)
	for _, sc := range []uint32{0, 1, 7, 1 << 31, ^uint32(0)} {
		k := e.key("scheme", fmt.Sprint(sc))
		r := s.req(k, "p")
		r.Scheme = sc
		requireTrue(t, e.claim(r).Claimed)
		c := e.claim(s.req(k, "p"))
		requireFalse(t, c.Claimed)
		assertEqual(t, sc, c.Record.Scheme, "a PROCESSING record keeps its scheme")
		requireNoError(t, e.store.Complete(e.ctx, k, r.Token, succeeded("x"), 20*s.Unit))
		later := s.req(k, "p")
		later.Scheme = sc + 1
		c = e.claim(later)
		requireFalse(t, c.Claimed)
		assertEqual(t, sc, c.Record.Scheme, "a final record keeps the scheme of its claim")
	}
}

func (s *suite) renewer(t testing.TB, e *env) idem.Renewer {
	t.Helper()
	r, ok := e.store.(idem.Renewer)
	if !ok {
		t.Skipf("%T does not implement idem.Renewer", e.store)
	}
	return r
}

// renew: a renewed claim holds past its first lease; the holder's Renew is
// idempotent.
func (s *suite) renew(t testing.TB) {
	e := s.env(t)
	rn := s.renewer(t, e)
	r := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(r).Claimed)
	requireNoError(t, rn.Renew(e.ctx, r.Key, r.Token, 4*s.Unit))
	requireNoError(t, rn.Renew(e.ctx, r.Key, r.Token, 4*s.Unit), "the same Renew repeated is the same success")
	s.sleep(s.Unit + s.Unit/2)
	c := e.claim(s.req(r.Key, "p"))
	requireFalse(t, c.Claimed, "a renewed claim is not taken over at its old lease's end")
	assertEqual(t, idem.StatusProcessing, c.Record.Status)
	assertEqual(t, r.Token, c.Record.Token)
	assertGreater(t, c.Record.LeaseLeft, time.Duration(0))
	assertLessOrEqual(t, c.Record.LeaseLeft, 4*s.Unit, "the lease runs from the store's now")
	requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("renewed"), 20*s.Unit))
	assertErrorIs(t, rn.Renew(e.ctx, e.key("never-claimed"), r.Token, s.Unit), idem.ErrLeaseLost, "an absent record cannot be renewed")
}

// renewNeverBeyondExpiry: a lease is never renewed past the record's expiry.
func (s *suite) renewNeverBeyondExpiry(t testing.TB) {
	e := s.env(t)
	rn := s.renewer(t, e)
	r := s.req(e.key("a"), "p")
	r.Lease, r.TTL = s.Unit, 3*s.Unit
	requireTrue(t, e.claim(r).Claimed)
	requireNoError(t, rn.Renew(e.ctx, r.Key, r.Token, 100*s.Unit))
	c := e.claim(s.req(r.Key, "p"))
	requireFalse(t, c.Claimed)
	assertLessOrEqual(t, c.Record.LeaseLeft, 3*s.Unit, "the lease ends at the latest with the record")
	s.sleep(4 * s.Unit)
	c = e.claim(s.req(r.Key, "q"))
	assertTrue(t, c.Claimed, "the record expired on time despite the renewal")
	assertErrorIs(t, rn.Renew(e.ctx, r.Key, r.Token, s.Unit), idem.ErrLeaseLost)
}

// renewAfterTakeover: a claim that lapsed and was taken over cannot renew;
// the heir can.
func (s *suite) renewAfterTakeover(t testing.TB) {
	e := s.env(t)
	rn := s.renewer(t, e)
	zombie := s.req(e.key("a"), "p")
	requireTrue(t, e.claim(zombie).Claimed)
	s.sleep(s.Unit + s.Unit/2)
	heir := s.req(zombie.Key, "p")
	c := e.claim(heir)
	requireTrue(t, c.Claimed)
	requireTrue(t, c.TakenOver)
	assertErrorIs(t, rn.Renew(e.ctx, zombie.Key, zombie.Token, 10*s.Unit), idem.ErrLeaseLost, "a taken-over claim cannot renew")
	requireNoError(t, rn.Renew(e.ctx, heir.Key, heir.Token, 10*s.Unit))
	assertErrorIs(t, e.store.Complete(e.ctx, zombie.Key, zombie.Token, succeeded("zombie"), 20*s.Unit), idem.ErrLeaseLost)
	requireNoError(t, e.store.Complete(e.ctx, heir.Key, heir.Token, succeeded("heir"), 20*s.Unit))
}

// capacity: a bounded store refuses new claims when full, with an error
// wrapping idem.ErrStoreFull, never dropping a live record; duplicates are
// still answered; expired records make room.
func (s *suite) capacity(t testing.TB) {
	if s.NewBounded == nil {
		t.Skip("Options.NewBounded is nil: the store has no bound")
	}
	const capacity = 8
	e := s.env(t)
	e.store = s.NewBounded(testingT(t), capacity)
	reqs := make([]idem.ClaimRequest, 3*capacity)
	for i := range reqs {
		reqs[i] = s.req(e.key("cap", fmt.Sprint(i)), "p")
		reqs[i].Lease, reqs[i].TTL = 100*s.Unit, 100*s.Unit
	}
	for _, r := range reqs[:capacity] {
		requireTrue(t, e.claim(r).Claimed)
	}
	full := func(r idem.ClaimRequest, why string) {
		t.Helper()
		_, err := e.store.Claim(e.ctx, r)
		requireErrorIs(t, err, idem.ErrStoreFull, why)
	}
	full(reqs[capacity], "a new claim beyond the capacity is refused")
	assertTrue(t, e.claim(reqs[0]).Claimed, "a full store still answers a claim repeated by its own token")
	for i, r := range reqs[:capacity] {
		c := e.claim(s.req(r.Key, "p"))
		requireFalse(t, c.Claimed, "record %d", i)
		assertEqual(t, r.Token, c.Record.Token, "record %d: no live record is dropped to make room", i)
	}

	// Final records inside their TTL keep their place.
	for _, r := range reqs[:capacity/2] {
		requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("done"), 2*s.Unit), "a full store stores outcomes")
	}
	full(reqs[capacity], "an unexpired final record is not dropped to make room")
	c := e.claim(s.req(reqs[0].Key, "p"))
	requireFalse(t, c.Claimed)
	assertEqual(t, []byte("done"), c.Record.Outcome.Body, "a full store still replays")

	// Expired records make room.
	s.sleep(3 * s.Unit)
	for _, r := range reqs[capacity : capacity+capacity/2] {
		requireTrue(t, e.claim(r).Claimed, "expired records make room")
	}
	full(reqs[capacity+capacity/2], "full again")
	requireNoError(t, e.store.Release(e.ctx, reqs[capacity/2].Key, reqs[capacity/2].Token))
	requireTrue(t, e.claim(reqs[capacity+capacity/2]).Claimed, "a released record makes room")
	for _, r := range reqs[capacity/2+1 : capacity] {
		c := e.claim(s.req(r.Key, "p"))
		requireFalse(t, c.Claimed)
		assertEqual(t, r.Token, c.Record.Token, "live records survive")
	}
}

// sweep: Sweep removes at most limit expired records and returns how many;
// a caller loops while it returns limit; live records stay.
func (s *suite) sweep(t testing.TB) {
	if s.Sweep == nil {
		t.Skip("Options.Sweep is nil: the store has no Sweep")
	}
	e := s.env(t)
	const expired, limit = 5, 2
	for i := range expired {
		r := s.req(e.key("old", fmt.Sprint(i)), "p")
		r.Lease, r.TTL = s.Unit, 2*s.Unit
		requireTrue(t, e.claim(r).Claimed)
		if i%2 == 0 {
			requireNoError(t, e.store.Complete(e.ctx, r.Key, r.Token, succeeded("old"), 2*s.Unit))
		}
	}
	live := make([]idem.ClaimRequest, 3)
	for i := range live {
		live[i] = s.req(e.key("live", fmt.Sprint(i)), "p")
		live[i].Lease, live[i].TTL = 200*s.Unit, 200*s.Unit
		requireTrue(t, e.claim(live[i]).Claimed)
	}
	requireNoError(t, e.store.Complete(e.ctx, live[0].Key, live[0].Token, succeeded("live"), 200*s.Unit))
	s.sleep(3 * s.Unit)

	n, err := s.Sweep(e.ctx, e.store, limit)
	requireNoError(t, err)
	requireEqual(t, limit, n, "with more expired records than limit, Sweep removes exactly limit")
	total := n
	for i := 0; n == limit; i++ {
		requireLess(t, i, 10000, "Sweep(limit) never returned less than limit")
		n, err = s.Sweep(e.ctx, e.store, limit)
		requireNoError(t, err)
		requireLessOrEqual(t, n, limit, "Sweep removes at most limit records")
		requireGreaterOrEqual(t, n, 0)
		total += n
	}
	assertGreaterOrEqual(t, total, expired, "looping while Sweep returns limit removes every expired record")

	// limit <= 0 means every expired record, in every store.
	for i := range expired {
		r := s.req(e.key("old2", fmt.Sprint(i)), "p")
		r.Lease, r.TTL = s.Unit, 2*s.Unit
		requireTrue(t, e.claim(r).Claimed)
	}
	s.sleep(3 * s.Unit)
	n, err = s.Sweep(e.ctx, e.store, 0)
	requireNoError(t, err)
	assertGreaterOrEqual(t, n, expired, "Sweep(ctx, 0) removes every expired record")
	n, err = s.Sweep(e.ctx, e.store, -1)
	requireNoError(t, err)
	assertEqual(t, 0, n, "nothing expired is left after Sweep(ctx, 0)")
	for i, r := range live {
		c := e.claim(s.req(r.Key, "p"))
		requireFalse(t, c.Claimed, "live record %d survives Sweep", i)
		assertEqual(t, r.Token, c.Record.Token)
	}
}

// retrying is a store whose transport loses the reply of every call and
// sends the call again, as go-redis and database drivers retry a command
// after a network error: every operation reaches the store twice with the
// same arguments, and the caller sees the second answer.
type retrying struct {
	idem.Store
	repeats atomic.Int64
}

func (r *retrying) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	_, _ = r.Store.Claim(ctx, req)
	r.repeats.Add(1)
	return r.Store.Claim(ctx, req)
}

func (r *retrying) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	_ = r.Store.Complete(ctx, key, token, out, ttl)
	r.repeats.Add(1)
	return r.Store.Complete(ctx, key, token, out, ttl)
}

func (r *retrying) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	_ = r.Store.Release(ctx, key, token)
	r.repeats.Add(1)
	return r.Store.Release(ctx, key, token)
}

// observed collects the executor's events.
type observed struct {
	mu     sync.Mutex
	counts map[idem.EventKind]int
	errs   []error
}

func (o *observed) observe(ev idem.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = map[idem.EventKind]int{}
	}
	o.counts[ev.Kind]++
	if ev.Err != nil && (ev.Kind == idem.EventLeaseLost || ev.Kind == idem.EventStoreError) {
		o.errs = append(o.errs, ev.Err)
	}
}

func (o *observed) failures() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.errs...)
}

// doLostRepliesRetried: every store call's reply is lost and the call sent
// again (the transport's retry): callers still get their success, the
// method runs once per decision, and no caller is blocked by its own claim.
func (s *suite) doLostRepliesRetried(t testing.TB) {
	e := s.env(t)
	if _, tx := e.store.(idem.TxStore); tx {
		t.Skip("a transactional store's claim and outcome are one transaction, not separate calls")
	}
	store := &retrying{Store: e.store}
	var ev observed
	ex := idem.NewExecutor(store, idem.WithTenant(func(context.Context) string { return e.tenant }),
		idem.WithLease(20*s.Unit), idem.WithObserver(ev.observe))
	m := testMethod
	m.Final = []idem.FinalError{{Name: "errDeclined", Err: errDeclined}}
	var runs atomic.Int32

	v, err := charge(e.ctx, ex, &m, "lost-1", "100", func(context.Context) (string, error) {
		runs.Add(1)
		return "receipt-1", nil
	})
	requireNoError(t, err, "a claim and an outcome whose replies were lost and retried are the caller's success")
	assertEqual(t, "receipt-1", v)
	v, err = charge(e.ctx, ex, &m, "lost-1", "100", func(context.Context) (string, error) {
		runs.Add(1)
		return "receipt-2", nil
	})
	requireNoError(t, err)
	assertEqual(t, "receipt-1", v, "the outcome is replayed")
	assertEqual(t, int32(1), runs.Load())

	_, err = charge(e.ctx, ex, &m, "lost-2", "100", func(context.Context) (string, error) {
		return "", fmt.Errorf("charge: %w", errDeclined)
	})
	requireErrorIs(t, err, errDeclined)
	_, err = charge(e.ctx, ex, &m, "lost-2", "100", func(context.Context) (string, error) { return "ran", nil })
	assertErrorIs(t, err, errDeclined, "a final error whose Complete was retried is replayed")

	transient := errors.New("connection reset")
	_, err = charge(e.ctx, ex, &m, "lost-3", "100", func(context.Context) (string, error) { return "", transient })
	requireErrorIs(t, err, transient)
	v, err = charge(e.ctx, ex, &m, "lost-3", "100", func(context.Context) (string, error) { return "second", nil })
	requireNoError(t, err, "a Release whose reply was lost and retried released the key")
	assertEqual(t, "second", v)

	assertEqual(t, []error(nil), ev.failures(), "no lease lost and no store error for calls that succeeded")
	assertGreater(t, store.repeats.Load(), 0, "the store saw repeated calls")
}

// losing is a store that applies a Complete and then loses its reply once,
// returning a network error: the executor's own retry meets the applied
// outcome.
type losing struct {
	idem.Store
	lost atomic.Int64
}

var errReplyLost = errors.New("idemtest: reply lost (connection reset)")

func (l *losing) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := l.Store.Complete(ctx, key, token, out, ttl); err != nil {
		return err
	}
	if l.lost.Add(1) == 1 {
		return errReplyLost
	}
	return nil
}

// doLostCompleteReply: the reply to an applied Complete is lost; the
// executor retries it and the caller gets its success, not ErrLeaseLost.
func (s *suite) doLostCompleteReply(t testing.TB) {
	e := s.env(t)
	if _, tx := e.store.(idem.TxStore); tx {
		t.Skip("a transactional store completes inside the claim's transaction")
	}
	store := &losing{Store: e.store}
	var ev observed
	ex := idem.NewExecutor(store, idem.WithTenant(func(context.Context) string { return e.tenant }),
		idem.WithLease(20*s.Unit), idem.WithObserver(ev.observe))
	runs := 0
	fn := func(context.Context) (string, error) { runs++; return fmt.Sprint("receipt-", runs), nil }
	v, err := charge(e.ctx, ex, &testMethod, "lost-complete", "100", fn)
	requireNoError(t, err, "an outcome stored whose reply was lost is the caller's success")
	assertEqual(t, "receipt-1", v)
	assertGreaterOrEqual(t, store.lost.Load(), int64(2), "the executor retried the Complete")
	v, err = charge(e.ctx, ex, &testMethod, "lost-complete", "100", fn)
	requireNoError(t, err)
	assertEqual(t, "receipt-1", v)
	assertEqual(t, 1, runs)
	assertEqual(t, []error(nil), ev.failures())
}
