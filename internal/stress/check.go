package stress

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemgen/idemgen/internal/stress/stormsvc"
	"github.com/idemgen/idemgen/runtime/idem"
)

// limits are the documented limits that apply to a run.
type limits struct {
	tx bool // transactional mode: no takeover, no lease-mode stall limit
	// mayLose: plain Redis, and the scenario lost records.
	mayLose bool
	env     *Env
	// completeErrs counts, per key text, the store_error events the
	// executor's observer reported for a Complete (it gave up when the
	// claim's lease ended before the store could be reached).
	completeErrs map[string]int
	// outage is the longest time a fault left the store unreachable;
	// leases are the keys' leases, per key text, as their claims asked.
	outage time.Duration
	leases map[string]time.Duration
}

// LimitOutage is lease mode's documented limit, in the words of the user
// documents (README, the idem and store package docs): the harness allows
// an extra execution charged to complete-store-error only where it holds.
const LimitOutage = "In lease mode, a store outage longer than the lease after the method ran can run it again; transactional mode cannot."

// allow returns how many executions key (text) may have, and why more than
// one: lease mode's stall after the side effect; a Complete that failed
// because the store could not be reached for longer than the key's lease
// (LimitOutage: the claim lapsed, and a retry then runs the method again);
// a record plain Redis lost. Transactional mode has no such limit: a
// failed commit rolls the method's writes back with it. note says why a
// complete-store-error does not apply, when it does not: an outage shorter
// than the lease must lose nothing.
func (l limits) allow(text string, class keyClass) (n int, why map[string]int, note string) {
	why = map[string]int{}
	if class == classStallAfter && !l.tx {
		why["stall-after-effect"] = 1
	}
	if !l.tx && l.completeErrs[text] > 0 {
		if lease := l.leases[text]; lease > 0 && l.outage >= lease {
			why["complete-store-error"] = l.completeErrs[text]
		} else {
			note = fmt.Sprintf("no complete-store-error allowance: the longest outage (%v) was shorter than the key's lease (%v)", l.outage.Round(time.Millisecond), lease)
		}
	}
	if l.mayLose {
		if n := l.env.lossesOf(text); n > 0 {
			why["lost-record"] = n
		}
	}
	n = 1
	for _, k := range why {
		n += k
	}
	return n, why, note
}

// payKeyCheck is what the checks gather about one Pay key.
type payKeyCheck struct {
	receipt *stormsvc.Receipt
	paid    bool           // a call got a receipt
	kinds   map[string]int // the callers' outcomes by kind
	limit   int            // executions allowed
	why     map[string]int // the documented limits behind limit
	note    string         // a limit that does not apply, and why
}

// checkCalls checks every caller's outcome, then the executions per key.
func (r *run) checkCalls(res *Result) {
	pays := make([]payKeyCheck, r.st.Keys)
	for k := range pays {
		pays[k].kinds = map[string]int{}
		pays[k].limit, pays[k].why, pays[k].note = r.lim.allow(orderID(k)+"+pay", r.classes[k])
	}
	r.checkOutcomes(res, pays)
	r.checkExecutions(res, pays)
	r.countShipments(res)
}

// checkOutcomes checks that every call got an outcome its key's class
// documents, and that the receipts of a key agree.
func (r *run) checkOutcomes(res *Result, pays []payKeyCheck) {
	st, plan, results, classes, lim := &r.st, r.plan, r.results, r.classes, r.lim
	for i, c := range plan {
		cr := results[i]
		kind := Classify(cr.err)
		res.Kinds[kind]++
		if kind == "store" || kind == "db" {
			if res.ErrTo == 0 || cr.at < res.ErrFrom {
				res.ErrFrom = cr.at
			}
			res.ErrTo = max(res.ErrTo, cr.at+cr.dur)
		}
		if c.kind == callShip {
			switch kind {
			case "ok", "in_progress":
			case "lease_lost":
				// Documented for these keys: their lease (15ms) can run out
				// during one store round trip under load; the takeover
				// fences the first worker.
			case "store", "db":
				if lim.tx && st.ShipmentTTL > 0 && strings.Contains(cr.err.Error(), "the claimed row is gone") {
					// The transactional counterpart: the record's TTL
					// (30ms) ran out before the commit, which then finds
					// no live row and rolls everything back.
					continue
				}
				if !st.StoreFaults {
					res.failf("shipment %s: undocumented store error: %v", messageID(c.key), cr.err)
				}
			default:
				res.failf("shipment %s: unexpected %s: %v", messageID(c.key), kind, cr.err)
			}
			continue
		}
		pk := &pays[c.key]
		pk.kinds[kind]++
		class := classes[c.key]
		allowed := map[string]bool{"in_progress": true}
		switch class {
		case classNormal:
			allowed["ok"], allowed["mismatch"], allowed["transient"] = true, true, true
		case classPoor:
			allowed["final"], allowed["transient"] = true, true
		case classStallFinal:
			if lim.tx {
				// No takeover in transactional mode: the stalled call
				// holds the key's transaction; its final error commits
				// and is replayed.
				allowed["final"] = true
			} else {
				allowed["ok"], allowed["lease_lost"] = true, true
			}
		case classStallAfter:
			allowed["ok"] = true
			if !lim.tx {
				allowed["lease_lost"] = true
			}
		case classStallTransient:
			allowed["ok"], allowed["transient"] = true, true
		}
		if st.StoreFaults {
			allowed["store"], allowed["db"] = true, true
		}
		if pays[c.key].why["lost-record"] > 0 {
			// The record was lost under a running call: its Complete finds
			// no record (ErrLeaseLost: "or the record is gone").
			allowed["lease_lost"] = true
		}
		if !allowed[kind] {
			res.failf("order %s: undocumented outcome %s: %v", orderID(c.key), kind, cr.err)
		}
		want := amount(c.key)
		if c.conflict {
			want++
		}
		if kind != "ok" {
			continue
		}
		pk.paid = true
		rc := cr.receipt
		if rc == nil || rc.OrderID != orderID(c.key) || rc.Amount != want {
			res.failf("order %s: a call with amount %d got receipt %+v", orderID(c.key), want, rc)
			continue
		}
		switch {
		case pk.receipt == nil:
			pk.receipt = rc
		case *pk.receipt != *rc && pays[c.key].limit == 1:
			res.failf("order %s: two different receipts: %+v and %+v", orderID(c.key), *pk.receipt, *rc)
		}
	}

}

// checkExecutions checks the executions of every Pay key against its limit
// and its class (a stalled key's takeover and its zombie's lost lease), and
// attributes the extra ones to the documented limits.
func (r *run) checkExecutions(res *Result, pays []payKeyCheck) {
	st, classes, lim := &r.st, r.classes, r.lim
	res.ExecMin, res.ExecMax = -1, 0
	for k := range st.Keys {
		id := orderID(k)
		n := r.execs[id]
		if lim.tx && (classes[k] == classPoor || classes[k] == classStallFinal) {
			// Counted from the business table, a final error commits no
			// row (its writes roll back to the savepoint): not in min/max.
		} else if res.ExecMin < 0 || n < res.ExecMin {
			res.ExecMin = n
		}
		res.ExecMax = max(res.ExecMax, n)
		if n > pays[k].limit {
			res.failf("order %s executed %d times (limit %d: %v; %s)", id, n, pays[k].limit, pays[k].why, pays[k].note)
		}
		if n > 1 && n <= pays[k].limit {
			res.DocumentedDup += n - 1
			// Attribute the extra executions to the limits, in this order.
			extra := n - 1
			for _, w := range []string{"stall-after-effect", "complete-store-error", "lost-record"} {
				d := min(extra, pays[k].why[w])
				res.Documented[w] += d
				extra -= d
			}
		}
		if pays[k].paid && n == 0 {
			res.failf("order %s: a call got a receipt but no execution of the method counts", id)
		}
		ev := r.keyEvents[id+"+pay"]
		kinds := pays[k].kinds
		switch classes[k] {
		case classStallFinal, classStallAfter, classStallTransient:
			if lim.tx {
				if ev["taken_over"] > 0 || ev["lease_lost"] > 0 {
					res.failf("order %s: a takeover or a lost lease in transactional mode (events %v)", id, ev)
				}
				continue
			}
		}
		switch classes[k] {
		case classStallFinal, classStallAfter:
			if ev["taken_over"] < 1 {
				res.failf("order %s: the stalled worker's key was never taken over", id)
			}
			if kinds["lease_lost"] != 1 {
				res.failf("order %s: want exactly one call (the zombie) to get ErrLeaseLost, got %d", id, kinds["lease_lost"])
			}
		case classStallTransient:
			if ev["taken_over"] < 1 {
				res.failf("order %s: the stalled worker's key was never taken over", id)
			}
			if ev["lease_lost"] < 1 {
				res.failf("order %s: the zombie's Release was not fenced (no lease_lost event)", id)
			}
		case classPoor:
			if kinds["ok"] > 0 {
				res.failf("order %s: a customer without funds was charged", id)
			}
		}
	}
	if res.ExecMin < 0 {
		res.ExecMin = 0
	}
}

// countShipments reports the executions per shipment key (not bounded: their
// records expire during the storm).
func (r *run) countShipments(res *Result) {
	if st := &r.st; st.ShipmentKeys > 0 {
		res.ShipExecMin = -1
		for k := range st.ShipmentKeys {
			n := r.ledger.Shipments(shipOrder(k))
			if res.ShipExecMin < 0 || n < res.ShipExecMin {
				res.ShipExecMin = n
			}
			res.ShipExecMax = max(res.ShipExecMax, n)
		}
	}
}

// probe claims every key once more after the run, with the payload of its
// normal calls and a fresh token: a final record or a free key is fine; a
// PROCESSING record with a live lease is waited for (its lease plus a
// margin) and must then be gone or lapsed; a lapsed one that the probe takes
// over is a claim left behind by a store call that failed: allowed only in
// fault scenarios, and only for keys whose calls saw a store error (it is
// not stuck: any retry takes it over, as the probe did). A free key after a
// call got its outcome is a lost record: a failure, except where the store
// documents losses and the scenario lost records.
func (r *run) probe(ctx context.Context, res *Result) {
	st, plan, lim, store := &r.st, r.plan, r.lim, r.rec
	decided := map[int]bool{}
	for i, c := range plan {
		if c.kind == callPay {
			if k := Classify(r.results[i].err); k == "ok" || k == "final" {
				decided[c.key] = true
			}
		}
	}
	type target struct {
		key      idem.Key
		fp       idem.Fingerprint
		expiring bool
		decided  bool
	}
	var targets []target
	for k := range st.Keys {
		key, fp := payKey(r.tenant, k, false)
		targets = append(targets, target{key, fp, false, decided[k]})
	}
	for k := range st.ShipmentKeys {
		key, fp := shipKey(r.tenant, k)
		targets = append(targets, target{key, fp, st.ShipmentTTL > 0, false})
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	pctx := withClient(ctx, st.Workers)
	var tokens idem.Token = 0x9_0000_0000
	for i, t := range targets {
		tok := tokens + idem.Token(i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			outcome, msg := probeOne(pctx, store, t.key, t.fp, tok)
			for try := 0; outcome == "error" && st.StoreFaults && try < 10; try++ {
				// A fault may leave broken connections in the store's
				// pool: each fails once. Retry as a client would.
				time.Sleep(20 * time.Millisecond)
				outcome, msg = probeOne(pctx, store, t.key, t.fp, tok+idem.Token(try+1)<<48)
			}
			mu.Lock()
			defer mu.Unlock()
			switch outcome {
			case "final":
				res.Probe.Final++
			case "free":
				res.Probe.Free++
				if t.decided && !t.expiring && (!lim.mayLose || lim.env.lossesOf(t.key.Text) == 0) {
					res.failf("key %s: a call got its outcome, but the record is gone", t.key.Text)
				}
			case "leaked":
				res.Probe.Leaked++
				if !st.StoreFaults || r.keyEvents[t.key.Text]["store_error"] == 0 {
					res.failf("key %s: a PROCESSING record was left behind (taken over by the probe) without a store error to explain it", t.key.Text)
				}
				if lease := lim.leases[t.key.Text]; !lim.tx && lim.completeErrs[t.key.Text] > 0 && lim.outage < lease {
					// The takeover a retry would have made: it runs the
					// method again (the store-error duplicate the storm
					// would count if a retry came after the lease).
					res.failf("key %s: the executor gave up storing an outcome (a Complete store_error) although the longest outage (%v) was shorter than the key's lease (%v); the probe took the claim over, as a retry would, and would run the method again",
						t.key.Text, lim.outage.Round(time.Millisecond), lease)
				}
			case "stuck":
				res.Probe.Stuck++
				res.failf("key %s: %s", t.key.Text, msg)
			default:
				res.failf("key %s: probe: %s", t.key.Text, msg)
			}
		})
	}
	wg.Wait()
}

func probeOne(ctx context.Context, store idem.Store, key idem.Key, fp idem.Fingerprint, tok idem.Token) (string, string) {
	var last idem.Record
	for attempt := range 3 {
		req := idem.ClaimRequest{Key: key, Fingerprint: fp, Token: tok + idem.Token(attempt)<<40, Lease: time.Second, TTL: 2 * time.Second}
		c, err := store.Claim(ctx, req)
		if err != nil {
			return "error", err.Error()
		}
		if c.Claimed {
			if err := store.Release(ctx, key, req.Token); err != nil {
				return "error", "release of the probe's claim: " + err.Error()
			}
			if c.TakenOver {
				return "leaked", ""
			}
			return "free", ""
		}
		if c.Record.Status != idem.StatusProcessing {
			return "final", ""
		}
		if c.Record.LeaseLeft <= 0 {
			// Lapsed, but held under another payload: the probe cannot
			// take it over; it was left behind all the same.
			return "leaked", ""
		}
		if attempt > 0 && c.Record.Token == last.Token && c.Record.LeaseLeft > 0 {
			break
		}
		last = c.Record
		time.Sleep(c.Record.LeaseLeft + 20*time.Millisecond)
	}
	return "stuck", fmt.Sprintf("still PROCESSING (token %x, lease left %v) after its lease ran out", uint64(last.Token), last.LeaseLeft)
}
