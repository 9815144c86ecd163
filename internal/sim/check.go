package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/internal/sim/simsvc"
	"github.com/idemgen/idemgen/runtime/idem"
)

// outcome is what a call's answer or a stored record says happened: which
// execution produced it, for which payload, and whether it was a final
// error (with its message).
type outcome struct {
	final   bool
	exec    int64
	payload int64
	msg     string
	// sub: a final outcome the executor stored in place of one it could not
	// store (idem.NotStoredCode): it stands for the result its own caller
	// got, and is replayed as an error to the others.
	sub bool
}

// same reports whether two outcomes are the same: a substitute is known by
// its message only, since a replay cannot tell which execution it stands for.
func same(a, b outcome) bool {
	if a.sub || b.sub {
		return a.sub && b.sub && a.msg == b.msg
	}
	return a == b
}

func (o outcome) String() string {
	if o.sub {
		return fmt.Sprintf("the executor's substitute %q", o.msg)
	}
	if o.final {
		return fmt.Sprintf("final error %q", o.msg)
	}
	return fmt.Sprintf("result of exec #%d (payload %d)", o.exec, o.payload)
}

// keyState is the checker's view of one key, kept from what the store
// accepted (ground truth the link sees) and what the method bodies did.
type keyState struct {
	name   string
	method string
	ttl    time.Duration
	// epoch counts the record's lives: it ends when the record expires or
	// a losing store forgets it. Invariants hold within an epoch.
	epoch int

	holder     idem.Token // the token of the last accepted claim; 0 after release
	holderWk   *worker
	leaseUntil time.Time
	expires    time.Time // of the record (PROCESSING or final); zero when absent

	first   *outcome   // the first outcome stored in this epoch
	stored  *outcome   // the outcome the store holds
	decided *execution // the execution whose outcome this epoch keeps
	payload int64      // of the first claim of the epoch
}

func (ks *keyState) probePayload() int64 {
	if ks.first != nil {
		return ks.first.payload
	}
	return ks.payload
}

// lost forgets the record: a losing store restarted.
func (ks *keyState) lost() {
	ks.epoch++
	ks.holder, ks.holderWk = 0, nil
	ks.expires = time.Time{}
	ks.first, ks.stored, ks.decided = nil, nil, nil
}

func (w *world) tok(t idem.Token) string {
	if wk := w.tokens[t]; wk != nil {
		return fmt.Sprintf("t%d", wk.id)
	}
	return "t?"
}

// decode reads a stored outcome.
func (w *world) decode(out idem.Outcome) (outcome, error) {
	if out.Status == idem.StatusFailedFinal {
		if out.ErrCode == idem.NotStoredCode {
			return outcome{final: true, sub: true, msg: out.ErrMessage, exec: -1, payload: -1}, nil
		}
		o := outcome{final: true, msg: out.ErrMessage, exec: -1, payload: -1}
		if e := w.finals[out.ErrMessage]; e != nil {
			o.exec, o.payload = e.id, e.wk.req.Payload
		}
		return o, nil
	}
	if o, ok := w.decoded[string(out.Body)]; ok {
		return o, nil
	}
	var r simsvc.Result
	if err := json.Unmarshal(out.Body, &r); err != nil {
		return outcome{}, err
	}
	o := outcome{exec: r.Exec, payload: r.Payload}
	w.decoded[string(out.Body)] = o
	return o, nil
}

// onClaim sees a claim the store granted or refused.
func (w *world) onClaim(wk *worker, req idem.ClaimRequest, c idem.Claim) {
	ks := wk.ks
	if !c.Claimed {
		if c.Record.Status == idem.StatusProcessing {
			return
		}
		wk.seenEpoch = ks.epoch
		o, err := w.decode(c.Record.Outcome)
		switch {
		case err != nil:
			w.violate("%s: the store returned an outcome that does not decode: %v", ks.name, err)
		case ks.first == nil:
			w.violate("%s: the store returned %v, but none was stored in this life of the record", ks.name, o)
		case !same(o, *ks.first):
			w.violate("%s: replay differs from the first outcome: replayed %v, first %v", ks.name, o, *ks.first)
		}
		return
	}
	expired := !ks.expires.IsZero() && !w.now.Before(ks.expires)
	if ks.holder != 0 && ks.holder != req.Token && !expired {
		if ks.stored != nil {
			w.violate("%s: claim by %s granted over the stored %v", ks.name, wk, *ks.stored)
			return
		}
		if w.now.Before(ks.leaseUntil) {
			w.violate("%s: claim by %s granted while %s's lease is live (%v left)", ks.name, wk, ks.holderWk, ks.leaseUntil.Sub(w.now))
			return
		}
		if ks.holderWk.req.Payload != wk.req.Payload {
			w.violate("%s: %s (payload %d) took over the lease of %s (payload %d): a takeover across payloads",
				ks.name, wk, wk.req.Payload, ks.holderWk, ks.holderWk.req.Payload)
			return
		}
	}
	if expired {
		ks.epoch++
		ks.first, ks.stored, ks.decided = nil, nil, nil
		w.tracef("%s: the record expired; a new life begins", ks.name)
	}
	if ks.holder == 0 {
		ks.payload = wk.req.Payload
	}
	if ks.holder == req.Token && !c.TakenOver {
		return // a retried or duplicated claim of the holder: the record is unchanged
	}
	if prev := ks.holderWk; prev != nil && prev != wk {
		w.fence(prev)
	}
	ks.holder, ks.holderWk = req.Token, wk
	ks.leaseUntil = w.now.Add(req.Lease)
	ks.expires = w.now.Add(req.TTL)
	wk.claimEpoch = ks.epoch
}

// fence marks the execution of a worker whose lease was taken over.
func (w *world) fence(prev *worker) {
	prev.fenced = true
	e := prev.exec
	if e == nil || prev.completeOK {
		return
	}
	e.fenced = true
	if !e.decided {
		return // still running, or failed: a zombie if it ever decides
	}
	ks := prev.ks
	margin := lease/4 + 2*w.p.maxDelay // a backoff (at most lease/8) and two trips, with room to spare
	if prev.state != crashed && e.ended && prev.sawDown && !prev.linkFaulted &&
		w.downTil.Add(margin).Before(ks.leaseUntil) && e.endedAt.Add(margin).Before(ks.leaseUntil) {
		w.violate("%s: exec #%d decided (%s) but its outcome was not stored: the store was down (unreachable or answering an outage) until %v before its lease lapsed (no other fault), and the key was taken over: it runs again",
			ks.name, e.id, e.kind, ks.leaseUntil.Sub(w.downTil))
		return
	}
	if prev.state == crashed || prev.completeSent || !e.ended {
		e.excused = true
		w.stats.Stalls++
		w.tracef("%s: exec #%d decided but its outcome was not stored before its lease lapsed (the documented lease-stall case)", prev.ks.name, e.id)
		return
	}
	w.violate("%s: exec #%d decided (%s) but %s neither stored its outcome nor tried to; its lease lapsed and the key was taken over",
		prev.ks.name, e.id, e.kind, prev)
}

// onComplete sees an outcome the store accepted.
func (w *world) onComplete(wk *worker, out idem.Outcome, ttl time.Duration) {
	ks := wk.ks
	again := wk.completeOK && ks.stored != nil && ks.holder == wk.token
	wk.completeOK = true
	wk.seenEpoch = ks.epoch
	if ks.holder != wk.token {
		w.violate("%s: a fenced zombie completed: the store accepted %s's outcome while the key is held by %s",
			ks.name, wk, w.holderName(ks))
		return
	}
	if again {
		return // a retried or duplicated Complete of the same token: the record is unchanged
	}
	o, err := w.decode(out)
	if err != nil {
		w.violate("%s: stored outcome does not decode: %v", ks.name, err)
		return
	}
	if o.sub && wk.exec != nil {
		o.exec, o.payload = wk.exec.id, wk.req.Payload
	}
	if ks.first == nil {
		ks.first = &o
	} else if !same(o, *ks.first) {
		w.violate("%s: outcome changed: %v stored after the first %v", ks.name, o, *ks.first)
		return
	}
	ks.stored = &o
	ks.expires = w.now.Add(ttl)
}

func (w *world) holderName(ks *keyState) string {
	if ks.holderWk == nil {
		return "nobody"
	}
	return ks.holderWk.String()
}

// onRenew sees a lease renewal the store accepted.
func (w *world) onRenew(wk *worker, lease time.Duration) {
	ks := wk.ks
	if ks.holder != wk.token {
		w.violate("%s: the store renewed the lease of %s while the key is held by %s", ks.name, wk, w.holderName(ks))
		return
	}
	ks.leaseUntil = w.now.Add(lease)
	if ks.leaseUntil.After(ks.expires) {
		ks.leaseUntil = ks.expires
	}
	w.stats.Renewals++
}

// onRelease sees a release the store accepted.
func (w *world) onRelease(wk *worker) {
	ks := wk.ks
	if ks.holder == 0 || !ks.expires.IsZero() && !w.now.Before(ks.expires) {
		return // a retried release of a record already gone (or expired): idempotent
	}
	if ks.holder != wk.token {
		w.violate("%s: the store accepted a release by %s while the key is held by %s", ks.name, wk, w.holderName(ks))
		return
	}
	ks.holder, ks.holderWk = 0, nil
	ks.expires = time.Time{}
}

// checkExecution runs when a method body starts: no execution may start
// while an earlier one of the same record's life decided an outcome that
// was not lost to the lease-stall case.
func (w *world) checkExecution(e *execution) {
	ks := e.wk.ks
	if e.wk.fenced {
		// Its lease lapsed and was taken over before it ran: the reply to
		// its claim came late, or a retried claim of its own token was
		// answered "claimed" without a fresh lease. A zombie from the
		// start: counted apart, like the lease-stall case.
		e.fenced = true
		w.stats.LateStarts++
		w.tracef("%s: exec #%d runs although its lease was already taken over (it started as a zombie)", ks.name, e.id)
		return
	}
	if d := ks.decided; d != nil && d.epoch == ks.epoch && e.epoch == ks.epoch && !d.excused {
		w.violate("%s: executed twice: exec #%d (%s) runs after exec #%d decided (%s) in the same life of the record",
			ks.name, e.id, e.wk, d.id, d.kind)
	}
}

// decide records that e's method returned an outcome that must be kept.
func (w *world) decide(e *execution) {
	e.decided = true
	ks := e.wk.ks
	if e.fenced || e.wk.fenced {
		w.stats.Stalls++
		e.excused = true
		w.tracef("%s: exec #%d decided after its lease was taken over (a zombie: the documented lease-stall case)", ks.name, e.id)
		return
	}
	if e.epoch != ks.epoch {
		return // the record it ran under is gone (expired or lost)
	}
	if d := ks.decided; d == nil || d.epoch != ks.epoch || d.excused {
		ks.decided = e
	}
}

// answered checks what a call returned to its caller.
func (w *world) answered(wk *worker) {
	if wk.replied {
		return
	}
	wk.replied = true
	ks := wk.ks
	switch wk.how {
	case "panic":
		w.tracef("%s returns: panic %v", wk, wk.panicV)
	case "goexit":
		w.tracef("%s leaves by runtime.Goexit", wk)
	default:
		w.tracef("%s returns: %s", wk, w.answerText(wk))
	}
	w.checkAnswer(wk)
	// A call that ended (even by Goexit) leaves no claim behind, unless the
	// link failed one of its requests.
	if ks.holderWk == wk && !wk.completeOK && !wk.faulted && w.now.Before(ks.leaseUntil) && len(w.violations) == 0 {
		w.violate("%s: %s ended (%s) but its claim stays PROCESSING for the rest of its lease (%v)", ks.name, wk, wk.how, ks.leaseUntil.Sub(w.now))
	}
	// A release that met only a store outage is sent again by the
	// executor until it passes or the lease ends: the claim is not left
	// to block every retry for the rest of its lease.
	if ks.holderWk == wk && !wk.completeOK && wk.releaseDown && !wk.releaser && !wk.linkFaulted && w.now.Before(ks.leaseUntil) && len(w.violations) == 0 {
		w.violate("%s: %s ended (%s); its release met a store outage, and nothing sends it again: its claim stays PROCESSING for the rest of its lease (%v)",
			ks.name, wk, wk.how, ks.leaseUntil.Sub(w.now))
	}
	if len(w.violations) == 0 {
		w.clientDone(wk)
	}
}

func (w *world) answerText(wk *worker) string {
	if wk.err != nil {
		return "error: " + wk.err.Error()
	}
	if wk.res == nil {
		return "nil result"
	}
	return fmt.Sprintf("result of exec #%d (payload %d)", wk.res.Exec, wk.res.Payload)
}

func (w *world) checkAnswer(wk *worker) {
	if wk.how != "returned" {
		return
	}
	ks := wk.ks
	var got outcome
	switch {
	case wk.err == nil:
		if wk.res == nil {
			w.violate("%s: %s told success with a nil result", ks.name, wk)
			return
		}
		got = outcome{exec: wk.res.Exec, payload: wk.res.Payload}
	case errors.Is(wk.err, idem.ErrLeaseLost):
		if wk.storedWhenAnswered {
			w.violate("%s: %s told %q, but the store accepted its outcome", ks.name, wk, wk.err)
		}
		return
	case errors.Is(wk.err, idem.ErrOutcomeNotStored):
		// The executor's substitute for an outcome it could not store:
		// the record must hold it.
		got = outcome{final: true, sub: true, msg: wk.err.Error()}
		if ks.first != nil && !same(*ks.first, got) && wk.seenEpoch == ks.epoch {
			w.violate("%s: %s told %v, but the record holds %v", ks.name, wk, got, *ks.first)
		}
		return
	case errors.Is(wk.err, idem.ErrFinal) || errors.Is(wk.err, simsvc.ErrRejected):
		e := w.finals[wk.err.Error()]
		if e == nil {
			w.violate("%s: %s got a final error no execution returned: %q", ks.name, wk, wk.err)
			return
		}
		if e.id%2 == 0 && !errors.Is(wk.err, idem.ErrFinal) || e.id%2 == 1 && !errors.Is(wk.err, simsvc.ErrRejected) {
			w.violate("%s: %s got final error %q, which is not errors.Is its sentinel", ks.name, wk, wk.err)
			return
		}
		got = outcome{final: true, exec: e.id, payload: e.wk.req.Payload, msg: e.finalMsg}
	default:
		return // transient, in progress, payload mismatch, store errors: the caller retries
	}
	if got.payload != wk.req.Payload {
		w.violate("%s: %s (payload %d) was given %v: a different payload's outcome", ks.name, wk, wk.req.Payload, got)
		return
	}
	if own := wk.exec; own != nil && own.id == got.exec && wk.completeOK && ks.first != nil && ks.first.sub && ks.first.exec == own.id {
		// Documented: the outcome could not be stored; the caller gets the
		// method's result, the record a substitute that tells retries so.
		w.stats.Unstored++
		return
	}
	if own := wk.exec; own != nil && own.id == got.exec && !wk.completeOK {
		if wk.completeRefused {
			w.violate("%s: %s told %v although the store refused its outcome (lease lost)", ks.name, wk, got)
			return
		}
		if wk.completeSent {
			// Documented: no reply to any Complete came back, so the caller
			// gets the method's result and the observer a store error.
			w.stats.Unstored++
			return
		}
		w.violate("%s: %s told %v, which the store does not hold (no Complete was attempted)", ks.name, wk, got)
		return
	}
	if ks.first != nil && !same(*ks.first, got) && wk.seenEpoch == ks.epoch {
		w.violate("%s: %s told %v, but the record holds %v", ks.name, wk, got, *ks.first)
	}
}
