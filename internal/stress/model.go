package stress

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Slack absorbs the difference between the recorder's clock and the store's
// (Redis keeps lease deadlines in whole milliseconds; Postgres in
// microseconds). The model only uses instants to bound when a lease may
// have lapsed or a record may have expired.
const Slack = 5 * time.Millisecond

// recState is the sequential model of one key's record.
//
// Instants are nanoseconds since the history's epoch, on the recorder's
// clock. A PROCESSING record's lease lapsed at some instant in
// [LapseMin, LapseMax] (the store's now at the claim, which lies between the
// claim's call and return, plus the lease); the record expires somewhere in
// [ExpireMin, ExpireMax] likewise.
type recState struct {
	Present   bool
	Status    idem.Status
	FP        idem.Fingerprint
	Token     idem.Token
	Out       uint64
	LapseMin  int64
	LapseMax  int64
	ExpireMin int64
	ExpireMax int64
	TTL       time.Duration // of a final record
	// Seen is the latest return of a claim answered with this final record:
	// tiered may have repaired it into its fast tier then, for up to one
	// more TTL (the repair is written before that claim returns, however
	// late a loaded machine runs it).
	Seen int64
	// Ghost is a final record that expired but may still be replayed until
	// Ghost.Until (stores with Options.StaleReplay: tiered replays a
	// repaired outcome from its fast tier for up to one TTL after the
	// durable record expired, as its documentation says).
	Ghost ghost
}

type ghost struct {
	Status idem.Status
	FP     idem.Fingerprint
	Token  idem.Token
	Out    uint64
	Until  int64
}

var absent = recState{}

func addSat(t int64, d time.Duration) int64 {
	if t > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return t + int64(d)
}

func subSat(t int64, d time.Duration) int64 {
	if t == math.MaxInt64 {
		return t
	}
	return t - int64(d)
}

// mayBeGone reports whether s may have expired by the time op in took effect
// (at the latest, its return).
func mayBeGone(s recState, in opInput) bool {
	return s.Present && addSat(in.Return, Slack) >= s.ExpireMin
}

// mustBeGone reports whether s had certainly expired before op in was called.
func mustBeGone(s recState, in opInput) bool {
	return s.Present && subSat(in.Call, Slack) > s.ExpireMax
}

// mayHaveLapsed reports whether a PROCESSING record's lease may have lapsed
// by the time op in took effect.
func mayHaveLapsed(s recState, in opInput) bool {
	return addSat(in.Return, Slack) >= s.LapseMin
}

// mustHaveLapsed reports whether the lease had certainly lapsed before op
// in was called.
func mustHaveLapsed(s recState, in opInput) bool {
	return subSat(in.Call, Slack) > s.LapseMax
}

func claimed(in opInput) recState {
	return recState{Present: true, Status: idem.StatusProcessing, FP: in.FP, Token: in.Token,
		LapseMin: addSat(in.Call, in.Lease), LapseMax: addSat(in.Return, in.Lease),
		ExpireMin: addSat(in.Call, in.TTL), ExpireMax: addSat(in.Return, in.TTL)}
}

// reclaimed is s after its own token claimed it again (a repeat after a
// lost reply): the lease is set afresh, never beyond the record's expiry.
func reclaimed(s recState, in opInput) recState {
	s.LapseMin = min(addSat(in.Call, in.Lease), s.ExpireMin)
	s.LapseMax = min(addSat(in.Return, in.Lease), s.ExpireMax)
	return s
}

func completed(s recState, in opInput) recState {
	return recState{Present: true, Status: in.Status, FP: s.FP, Token: s.Token, Out: in.Out, TTL: in.TTL,
		ExpireMin: addSat(in.Call, in.TTL), ExpireMax: addSat(in.Return, in.TTL)}
}

func holds(s recState, t idem.Token) bool {
	return s.Present && s.Status == idem.StatusProcessing && s.Token == t
}

// step is the model's transition: every state the store may be in after op
// (in, out) from s; none when the answer is impossible.
//
// The contract is deterministic except for time: a lease lapses and a record
// expires at an instant the history only bounds. So, while a record may have
// expired, the model also considers the key absent; while a PROCESSING
// record's lease may have lapsed, a same-payload claim may either be refused
// or take it over. Everything else is strict:
//
//   - a claim on an absent key succeeds, and is not a takeover;
//   - a takeover needs a PROCESSING record with the same fingerprint whose
//     lease may have lapsed; it installs the new token;
//   - a refused claim returns the current record: status, fingerprint, token
//     and (for a final record) the outcome, byte for byte; a record that had
//     certainly expired, or a same-payload lease that had certainly lapsed,
//     cannot refuse; a refused same-payload PROCESSING record has lease left;
//   - Complete and Release succeed when the record is PROCESSING with the
//     caller's token; every operation is idempotent for the caller's own
//     token (a retry after a lost reply): a claim repeated by the token that
//     holds the PROCESSING record (same fingerprint) is claimed and changes
//     nothing, a Complete by the token whose outcome is stored succeeds and
//     changes nothing, and a Release of an absent record succeeds; otherwise
//     they answer ErrLeaseLost and change nothing; a final record is never
//     overwritten or deleted by them;
//   - an operation that failed with a store error may have taken effect or
//     not, at any time after its call.
//
// With opts.MayLose (plain Redis, whose documented limit is that a restart
// without persistence, a failover or an eviction forgets acknowledged
// records), any record may also vanish at any instant: the key is then
// absent, with nothing left to replay.
func step(s recState, in opInput, out opOutput, opts ModelOptions) []recState {
	gone := absent
	gone.Ghost = s.Ghost
	if opts.StaleReplay && s.Present && s.Status != idem.StatusProcessing {
		gone.Ghost = ghost{Status: s.Status, FP: s.FP, Token: s.Token, Out: s.Out, Until: addSat(max(s.ExpireMax, s.Seen), s.TTL)}
	}
	pre := []recState{}
	if !mustBeGone(s, in) {
		pre = append(pre, s)
	}
	if mayBeGone(s, in) {
		pre = append(pre, gone)
	} else if opts.MayLose && s.Present {
		pre = append(pre, recState{})
	}
	if !s.Present {
		pre = []recState{s}
	}
	var next []recState
	for _, p := range pre {
		for _, n := range stepFrom(p, in, out, opts) {
			if n.Ghost == (ghost{}) {
				n.Ghost = p.Ghost
			}
			next = append(next, n)
		}
	}
	return next
}

// ghostAnswers reports whether a refused claim's answer is p's ghost, still
// replayable when the claim was called.
func ghostAnswers(p recState, in opInput, r recView) bool {
	g := p.Ghost
	return g.Until != 0 && subSat(in.Call, Slack) <= g.Until &&
		r.Status == g.Status && r.FP == g.FP && r.Token == g.Token && r.Out == g.Out
}

func stepFrom(p recState, in opInput, out opOutput, opts ModelOptions) []recState {
	switch in.Kind {
	case opClaimTx:
		return stepClaimTx(p, in, out, opts)
	case opCommit:
		return stepCommit(p, in, out)
	case opClaim:
		takeable := p.Present && p.Status == idem.StatusProcessing && p.FP == in.FP && mayHaveLapsed(p, in)
		if out.Unknown {
			if holds(p, in.Token) && p.FP == in.FP {
				// A repeat of its own claim may have set the lease afresh:
				// widen when it may lapse instead of branching (one state,
				// so that histories full of store errors stay checkable).
				p.LapseMax = max(p.LapseMax, reclaimed(p, in).LapseMax)
			}
			r := []recState{p}
			if !p.Present || takeable {
				r = append(r, claimed(in))
			}
			return r
		}
		if out.Claimed {
			switch {
			case !p.Present && !out.TakenOver:
				return []recState{claimed(in)}
			case takeable && out.TakenOver:
				return []recState{claimed(in)}
			case holds(p, in.Token) && p.FP == in.FP && !out.TakenOver:
				return []recState{reclaimed(p, in)} // repeated by its own token: a fresh lease
			}
			return nil
		}
		return refused(p, in, out, opts)
	case opComplete:
		ok := holds(p, in.Token)
		own := p.Present && p.Status != idem.StatusProcessing && p.Token == in.Token
		switch {
		case out.Unknown:
			if ok {
				return []recState{p, completed(p, in)}
			}
			return []recState{p}
		case out.LeaseLost:
			if ok || own {
				return nil
			}
			return []recState{p}
		case ok:
			return []recState{completed(p, in)}
		case own:
			return []recState{p} // repeated by its own token: the first outcome stays
		}
		return nil
	case opRelease:
		ok := holds(p, in.Token)
		switch {
		case out.Unknown:
			if ok {
				return []recState{p, absent}
			}
			return []recState{p}
		case out.LeaseLost:
			if ok || !p.Present {
				return nil
			}
			return []recState{p}
		case ok, !p.Present:
			return []recState{absent}
		}
		return nil
	}
	return nil
}

// refused checks a claim that was refused against the state p: the record
// returned must be the current one, byte for byte.
func refused(p recState, in opInput, out opOutput, opts ModelOptions) []recState {
	r := out.Rec
	if ghostAnswers(p, in, r) {
		return []recState{p}
	}
	if !p.Present {
		return nil // a claim on an absent key must succeed
	}
	if r.Status != p.Status || r.FP != p.FP || r.Token != p.Token {
		return nil
	}
	if p.Status == idem.StatusProcessing {
		if p.FP == in.FP && (r.LeaseLeft <= 0 || mustHaveLapsed(p, in)) {
			return nil // a lapsed same-payload lease must be taken over
		}
	} else if r.Out != p.Out {
		return nil
	} else if opts.StaleReplay && in.Return > p.Seen && in.Return != math.MaxInt64 {
		p.Seen = in.Return
	}
	return []recState{p}
}

// stepClaimTx is a claim in transactional mode (pgstore.NewTx). A claim that
// succeeded is not visible to anyone until its transaction commits (the
// commit is an opCommit of its own); it only tells that no live record
// blocked it. A duplicate that ran out of time on the key's lock (Busy) saw
// no committed record: the holder's claim is invisible, so the key must not
// hold a final record. A refusal with a committed record is checked as a
// lease-mode refusal.
func stepClaimTx(p recState, in opInput, out opOutput, opts ModelOptions) []recState {
	switch {
	case out.Unknown:
		// A failed ClaimTx rolls its transaction back: no effect.
		return []recState{p}
	case out.Busy:
		if p.Present && p.Status != idem.StatusProcessing {
			return nil
		}
		return []recState{p}
	case out.Claimed:
		takeable := p.Present && p.Status == idem.StatusProcessing && p.FP == in.FP && mayHaveLapsed(p, in)
		if p.Present && !takeable {
			return nil
		}
		return []recState{p}
	}
	return refused(p, in, out, opts)
}

// stepCommit is the commit of a transactional claim with its outcome: the
// claim, the method's writes and the final record become visible at once.
// Under the key's lock no other claim can have committed a record since the
// claim, so the key must be free (absent, or expired) when it commits; a
// commit that failed may or may not have happened.
func stepCommit(p recState, in opInput, out opOutput) []recState {
	free := !p.Present || (p.Status == idem.StatusProcessing && p.FP == in.FP && mayHaveLapsed(p, in))
	done := recState{Present: true, Status: in.Status, FP: in.FP, Token: in.Token, Out: in.Out, TTL: in.TTL,
		ExpireMin: addSat(in.Call, in.TTL), ExpireMax: addSat(in.Return, in.TTL)}
	switch {
	case out.Unknown:
		if free {
			return []recState{p, done}
		}
		return []recState{p}
	case free:
		return []recState{done}
	}
	return nil
}

// ModelOptions are the allowances of a store's documented limits.
type ModelOptions struct {
	// StaleReplay: an expired final record may still be replayed for one
	// more TTL (tiered, from its fast tier).
	StaleReplay bool
	// MayLose: any record may vanish at any instant (plain Redis: a restart
	// without persistence, a failover, an eviction).
	MayLose bool
}

// Model is the porcupine model of an idem.Store, partitioned by key. With
// opts.StaleReplay, an expired final record may still be replayed for one
// more TTL (tiered's documented limit); a key may then be claimed anew while
// the old outcome is still replayed. With opts.MayLose, any record may vanish
// (plain Redis's documented limit).
func Model(opts ModelOptions) porcupine.Model {
	return model(opts, nil)
}

// model is Model; with steps set, every step of the model counts there, and
// once steps.limit is reached, no step leads anywhere (the check then ends
// at once, and its verdict is void: see stepBudget).
func model(opts ModelOptions, steps *stepBudget) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			idx := map[[32]byte]int{}
			var parts [][]porcupine.Operation
			for _, op := range h {
				k := op.Input.(opInput).Key
				i, ok := idx[k]
				if !ok {
					i = len(parts)
					idx[k] = i
					parts = append(parts, nil)
				}
				parts[i] = append(parts[i], op)
			}
			return parts
		},
		Init: func() []any { return []any{absent} },
		Step: func(state, input, output any) []any {
			if steps != nil && steps.n.Add(1) > steps.limit {
				return nil
			}
			next := step(state.(recState), input.(opInput), output.(opOutput), opts)
			r := make([]any, len(next))
			for i, s := range next {
				r[i] = s
			}
			return r
		},
		Hash: func(state any) uint64 {
			s := state.(recState)
			h := fnv.New64a()
			fmt.Fprintf(h, "%v%d%x%d%d%d%d", s.Present, s.Status, s.FP[:8], s.Token, s.Out, s.ExpireMin, s.Ghost.Token)
			return h.Sum64()
		},
		DescribeOperation: describeOp,
		DescribeState: func(state any) string {
			s := state.(recState)
			if !s.Present {
				return "absent"
			}
			return fmt.Sprintf("%v fp=%x tok=%x", s.Status, s.FP[:3], uint64(s.Token)&0xffffff)
		},
	}
	return nm.ToModel()
}

func describeOp(input, output any) string {
	in, out := input.(opInput), output.(opOutput)
	var res string
	switch {
	case out.Unknown:
		res = "store error (unknown effect)"
	case out.LeaseLost:
		res = "ErrLeaseLost"
	case out.Busy:
		res = "busy (the key's lock is held)"
	case (in.Kind == opClaim || in.Kind == opClaimTx) && out.Claimed && out.TakenOver:
		res = "taken over"
	case (in.Kind == opClaim || in.Kind == opClaimTx) && out.Claimed:
		res = "claimed"
	case in.Kind == opClaim || in.Kind == opClaimTx:
		res = fmt.Sprintf("refused %v fp=%x tok=%x left=%v", out.Rec.Status, out.Rec.FP[:3],
			uint64(out.Rec.Token)&0xffffff, out.Rec.LeaseLeft)
	default:
		res = "ok"
	}
	switch in.Kind {
	case opClaim:
		return fmt.Sprintf("claim(%s fp=%x tok=%x) -> %s", in.Text, in.FP[:3], uint64(in.Token)&0xffffff, res)
	case opComplete:
		return fmt.Sprintf("complete(%s tok=%x %v) -> %s", in.Text, uint64(in.Token)&0xffffff, in.Status, res)
	case opClaimTx:
		return fmt.Sprintf("claimTx(%s fp=%x tok=%x) -> %s", in.Text, in.FP[:3], uint64(in.Token)&0xffffff, res)
	case opCommit:
		return fmt.Sprintf("commit(%s tok=%x %v) -> %s", in.Text, uint64(in.Token)&0xffffff, in.Status, res)
	default:
		return fmt.Sprintf("release(%s tok=%x) -> %s", in.Text, uint64(in.Token)&0xffffff, res)
	}
}

// CheckResult is the verdict of the linearizability check of one history.
type CheckResult struct {
	// Result is Ok when every key's history is linearizable, Illegal when
	// one is not, and Unknown when the check of a key could not decide
	// within its budget of steps (OverBudget) or its hang guard (Timeout).
	Result porcupine.CheckResult
	Ops    int
	Keys   int
	// MayLose: the check allowed records to vanish (ModelOptions.MayLose).
	MayLose bool
	// Steps is the most steps of the model the check of one key took; a
	// property of the history, the same on every machine.
	Steps int64
	// OverBudget names a key whose check exceeded StepBudget; TimedOut one
	// whose check was still running at the hang guard.
	OverBudget, TimedOut string
	// Viz is the path of the visualization written for an illegal history,
	// if one was asked for; Dump the path of the same partition as text
	// (DumpHistory).
	Viz, Dump string
}

// StepBudget bounds the steps of the model that the check of one key may
// take: a key whose history needs more is reported undecided (Unknown,
// OverBudget), the same on every machine, however slow or loaded; the
// check's timeout is only a hang guard. Histories of the storms take at
// most a few hundred thousand steps a key.
const StepBudget = 20_000_000

// reductions returns the histories to check for one key's history h, the
// smallest first, h itself last. An operation whose effect is unknown (the
// store returned an error: Return is infinite) may always be linearized
// last, as no effect; so if h without some of them is linearizable, h is
// too, and only h itself can be found illegal. A storm through a restart
// holds many such operations, which make the search for an order
// exponential; most had no effect, which the smaller histories settle in a
// few steps. The reductions: without every unknown operation; without the
// unknown claims and completes of tokens that no answer ever showed (a
// claim or complete that took effect would show in the record later
// operations read) or that the same token repeated with an answer; without
// the unknown claims and completes of tokens no answer showed; and h.
func reductions(h []porcupine.Operation) [][]porcupine.Operation {
	type done struct {
		kind  opKind
		token idem.Token
	}
	seen := map[idem.Token]bool{}
	known := map[done]bool{} // a claim or complete of the token that took effect, answered
	unknown := 0
	for _, op := range h {
		in, out := op.Input.(opInput), op.Output.(opOutput)
		switch {
		case out.Unknown:
			unknown++
			continue
		case in.Kind == opClaim && out.Claimed, in.Kind == opComplete && !out.LeaseLost:
			known[done{in.Kind, in.Token}] = true
		}
		if out.Rec.Status != 0 {
			seen[out.Rec.Token] = true
		}
	}
	if unknown == 0 {
		return [][]porcupine.Operation{h}
	}
	keep := func(op porcupine.Operation, repeats bool) bool {
		in, out := op.Input.(opInput), op.Output.(opOutput)
		switch {
		case !out.Unknown, in.Kind == opRelease, in.Kind == opCommit:
			return true
		case !seen[in.Token]:
			return false
		}
		// With repeats false, an unknown claim or complete repeated by the
		// same token with an answer is left out: the answered one shows
		// the effect.
		return repeats || !known[done{in.Kind, in.Token}]
	}
	r := [][]porcupine.Operation{}
	last := -1
	for _, pass := range []func(porcupine.Operation) bool{
		func(op porcupine.Operation) bool { return !op.Output.(opOutput).Unknown },
		func(op porcupine.Operation) bool { return keep(op, false) },
		func(op porcupine.Operation) bool { return keep(op, true) },
	} {
		var sub []porcupine.Operation
		for _, op := range h {
			if pass(op) {
				sub = append(sub, op)
			}
		}
		if len(sub) > last && len(sub) < len(h) {
			r = append(r, sub)
			last = len(sub)
		}
	}
	return append(r, h)
}

// stepBudget counts the steps of one key's check.
type stepBudget struct {
	n     atomic.Int64
	limit int64
}

// DumpHistory returns ops as text, one operation a line in the order of
// their call instants: call and return (ms since the history's epoch; "?"
// for an unknown effect), the worker, the operation and its answer, and the
// lease and TTL asked. It is what a failed run leaves beside its
// visualization, readable without a browser.
func DumpHistory(ops []porcupine.Operation) string {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var b strings.Builder
	ms := func(t int64) string {
		if t == math.MaxInt64 {
			return "?"
		}
		return fmt.Sprintf("%.3f", float64(t)/1e6)
	}
	for _, op := range ops {
		in := op.Input.(opInput)
		fmt.Fprintf(&b, "%10s %10s w%-3d %s", ms(op.Call), ms(in.Return), op.ClientId, describeOp(op.Input, op.Output))
		if in.Lease > 0 || in.TTL > 0 {
			fmt.Fprintf(&b, " lease=%v ttl=%v", in.Lease, in.TTL)
		}
		if in.Kind == opComplete || in.Kind == opCommit {
			fmt.Fprintf(&b, " out=%x", in.Out&0xffffff)
		}
		if o := op.Output.(opOutput); !o.Claimed && !o.Unknown && !o.Busy && o.Rec.Status != idem.StatusProcessing && o.Rec.Status != 0 {
			fmt.Fprintf(&b, " rec.out=%x", o.Rec.Out&0xffffff)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Check checks history against Model(opts), key by key (the model is per
// key): each key's history is checked on its own, GOMAXPROCS at a time,
// within StepBudget steps of the model, so that the verdict comes from the
// history, not from the machine's speed. timeout is a hang guard for the
// whole check, not a budget: a key still undecided then is reported as
// TimedOut. With vizDir set, an illegal history's visualization (HTML) is
// written there.
func Check(history []porcupine.Operation, opts ModelOptions, timeout time.Duration, vizDir, name string) (CheckResult, error) {
	return check(history, opts, StepBudget, timeout, vizDir, name)
}

// check is Check with a budget of its own.
func check(history []porcupine.Operation, opts ModelOptions, budget int64, timeout time.Duration, vizDir, name string) (CheckResult, error) {
	parts := Model(opts).Partition(history)
	res := CheckResult{Ops: len(history), Keys: len(parts), MayLose: opts.MayLose, Result: porcupine.Ok}
	type verdict struct {
		result porcupine.CheckResult
		steps  int64
		over   bool
	}
	verdicts := make([]verdict, len(parts))
	deadline := time.Now().Add(timeout)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), max(len(parts), 1)) {
		wg.Go(func() {
			for i := range next {
				var v verdict
				for _, h := range reductions(parts[i]) {
					b := &stepBudget{limit: budget}
					left := time.Until(deadline)
					r := porcupine.Unknown
					if left > 0 {
						r = porcupine.CheckOperationsTimeout(model(opts, b), h, left)
					}
					n := b.n.Load()
					v = verdict{result: r, steps: v.steps + min(n, budget), over: n > budget}
					if r != porcupine.Illegal || v.over {
						break // decided (Ok), or no smaller history left to try
					}
				}
				verdicts[i] = v
			}
		})
	}
	for i := range parts {
		next <- i
	}
	close(next)
	wg.Wait()
	var bad []porcupine.Operation
	for i, v := range verdicts {
		res.Steps = max(res.Steps, v.steps)
		key := parts[i][0].Input.(opInput).Text
		switch {
		case v.over:
			if res.OverBudget == "" {
				res.OverBudget = key
			}
		case v.result == porcupine.Illegal:
			if bad == nil {
				bad = parts[i]
			}
		case v.result == porcupine.Unknown:
			if res.TimedOut == "" {
				res.TimedOut = key
			}
		}
	}
	switch {
	case bad != nil:
		res.Result = porcupine.Illegal
	case res.OverBudget != "" || res.TimedOut != "":
		res.Result = porcupine.Unknown
	}
	if bad != nil && vizDir != "" {
		// Only the illegal partition is worth drawing.
		m := Model(opts)
		_, info := porcupine.CheckOperationsVerbose(m, bad, max(time.Until(deadline), time.Minute))
		res.Viz = vizDir + "/" + name + ".html"
		if err := porcupine.VisualizePath(m, info, res.Viz); err != nil {
			return res, err
		}
		res.Dump = vizDir + "/" + name + ".txt"
		if err := os.WriteFile(res.Dump, []byte(DumpHistory(bad)), 0o644); err != nil {
			return res, err
		}
	}
	return res, nil
}
