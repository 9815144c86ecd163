package stress

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// The model must reject what the contract forbids. Each case is a short
// sequential history of one key that some broken store could produce.
func TestModelRejects(t *testing.T) {
	const ms = int64(time.Millisecond)
	fpA, fpB := idem.Fingerprint{1}, idem.Fingerprint{2}
	claim := func(at int64, fp idem.Fingerprint, tok idem.Token, out opOutput) porcupine.Operation {
		in := opInput{Kind: opClaim, FP: fp, Token: tok, Lease: 100 * time.Millisecond, TTL: time.Hour, Call: at, Return: at + ms}
		if out.Unknown {
			in.Return = math.MaxInt64
		}
		return porcupine.Operation{Input: in, Output: out, Call: in.Call, Return: in.Return}
	}
	complete := func(at int64, tok idem.Token, digest uint64, out opOutput) porcupine.Operation {
		in := opInput{Kind: opComplete, Token: tok, TTL: time.Hour, Status: idem.StatusSucceeded, Out: digest, Call: at, Return: at + ms}
		return porcupine.Operation{Input: in, Output: out, Call: in.Call, Return: in.Return}
	}
	release := func(at int64, tok idem.Token, out opOutput) porcupine.Operation {
		in := opInput{Kind: opRelease, Token: tok, Call: at, Return: at + ms}
		return porcupine.Operation{Input: in, Output: out, Call: in.Call, Return: in.Return}
	}
	won := opOutput{Claimed: true}
	tookOver := opOutput{Claimed: true, TakenOver: true}
	held := func(fp idem.Fingerprint, tok idem.Token) opOutput {
		return opOutput{Rec: recView{Status: idem.StatusProcessing, FP: fp, Token: tok, LeaseLeft: 50 * time.Millisecond}}
	}
	done := func(tok idem.Token, digest uint64) opOutput {
		return opOutput{Rec: recView{Status: idem.StatusSucceeded, FP: fpA, Token: tok, Out: digest}}
	}
	ok, lost := opOutput{}, opOutput{LeaseLost: true}

	claimTx := func(at int64, fp idem.Fingerprint, tok idem.Token, out opOutput) porcupine.Operation {
		op := claim(at, fp, tok, out)
		in := op.Input.(opInput)
		in.Kind = opClaimTx
		op.Input = in
		return op
	}
	commit := func(at int64, tok idem.Token, digest uint64, out opOutput) porcupine.Operation {
		in := opInput{Kind: opCommit, FP: fpA, Token: tok, TTL: time.Hour, Status: idem.StatusSucceeded, Out: digest, Call: at, Return: at + ms}
		if out.Unknown {
			in.Return = math.MaxInt64
		}
		return porcupine.Operation{Input: in, Output: out, Call: in.Call, Return: in.Return}
	}
	busy := opOutput{Busy: true}
	doneTx := func(tok idem.Token, digest uint64) opOutput {
		return opOutput{Rec: recView{Status: idem.StatusSucceeded, FP: fpA, Token: tok, Out: digest}}
	}
	lose := ModelOptions{MayLose: true}

	cases := []struct {
		name  string
		legal bool
		h     []porcupine.Operation
		opts  ModelOptions
	}{
		{"lost record, claimed again (may lose)", true, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), claim(10*ms, fpA, 2, won)}, lose},
		{"lost claim, complete refused (may lose)", true, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, lost)}, lose},
		{"replay of another outcome (may lose)", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), claim(10*ms, fpA, 2, done(1, 8))}, lose},
		{"tx: claim, commit, replay; busy while held", true, []porcupine.Operation{
			claimTx(0, fpA, 1, won), claimTx(2*ms, fpA, 2, busy), commit(5*ms, 1, 7, ok), claimTx(10*ms, fpA, 3, doneTx(1, 7))}, ModelOptions{}},
		{"tx: a failed commit may not have happened", true, []porcupine.Operation{
			claimTx(0, fpA, 1, won), commit(5*ms, 1, 7, opOutput{Unknown: true}), claimTx(10*ms, fpA, 2, won), commit(15*ms, 2, 8, ok)}, ModelOptions{}},
		{"tx: two commits of one key", false, []porcupine.Operation{
			claimTx(0, fpA, 1, won), commit(5*ms, 1, 7, ok), claimTx(10*ms, fpA, 2, won), commit(15*ms, 2, 8, ok)}, ModelOptions{}},
		{"tx: busy after the commit", false, []porcupine.Operation{
			claimTx(0, fpA, 1, won), commit(5*ms, 1, 7, ok), claimTx(10*ms, fpA, 2, busy)}, ModelOptions{}},
		{"tx: claimed over a committed record", false, []porcupine.Operation{
			claimTx(0, fpA, 1, won), commit(5*ms, 1, 7, ok), claimTx(10*ms, fpA, 2, won)}, ModelOptions{}},

		{"claim, refuse, complete, replay", true, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(5*ms, fpA, 2, held(fpA, 1)), complete(10*ms, 1, 7, ok), claim(20*ms, fpA, 3, done(1, 7))}, ModelOptions{}},
		{"takeover after the lease, zombie fenced", true, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(200*ms, fpA, 2, tookOver), complete(210*ms, 1, 7, lost), complete(220*ms, 2, 8, ok), claim(230*ms, fpB, 3, done(2, 8))}, ModelOptions{}},
		{"a store error may or may not have claimed", true, []porcupine.Operation{
			claim(0, fpA, 1, opOutput{Unknown: true}), claim(5*ms, fpA, 2, won)}, ModelOptions{}},
		{"release then claim again", true, []porcupine.Operation{
			claim(0, fpA, 1, won), release(5*ms, 1, ok), claim(10*ms, fpB, 2, won)}, ModelOptions{}},
		{"own token: claim and complete repeated (lost replies)", true, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(2*ms, fpA, 1, won), complete(5*ms, 1, 7, ok), complete(8*ms, 1, 7, ok),
			complete(9*ms, 1, 8, ok), claim(10*ms, fpA, 2, done(1, 7))}, ModelOptions{}},
		{"own token: release repeated, release of an absent record", true, []porcupine.Operation{
			release(0, 4, ok), claim(5*ms, fpB, 3, won), release(10*ms, 3, ok), release(15*ms, 3, ok), claim(20*ms, fpA, 5, won)}, ModelOptions{}},

		{"claim on an absent key refused", false, []porcupine.Operation{
			claim(0, fpA, 1, held(fpA, 9))}, ModelOptions{}},
		{"two claims of a free key both win", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(5*ms, fpA, 2, won)}, ModelOptions{}},
		{"takeover of a live lease", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(10*ms, fpA, 2, tookOver)}, ModelOptions{}},
		{"takeover under another payload", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(500*ms, fpB, 2, tookOver)}, ModelOptions{}},
		{"lapsed lease refused long after", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(500*ms, fpA, 2, held(fpA, 1))}, ModelOptions{}},
		{"refusal with a wrong token", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(5*ms, fpA, 2, held(fpA, 7))}, ModelOptions{}},
		{"stale token completes", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(200*ms, fpA, 2, tookOver), complete(210*ms, 1, 7, ok)}, ModelOptions{}},
		{"holder's complete refused", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, lost)}, ModelOptions{}},
		{"completed record overwritten", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), complete(10*ms, 1, 8, ok), claim(20*ms, fpA, 2, done(1, 8))}, ModelOptions{}},
		{"completed record overwritten by another token", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), complete(10*ms, 2, 8, ok)}, ModelOptions{}},
		{"repeated complete refused", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), complete(10*ms, 1, 7, lost)}, ModelOptions{}},
		{"release of an absent record refused", false, []porcupine.Operation{
			release(0, 1, lost)}, ModelOptions{}},
		{"claim repeated by another token wins", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(5*ms, fpA, 2, won)}, ModelOptions{}},
		{"completed record released", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), release(10*ms, 1, ok)}, ModelOptions{}},
		{"replay of another outcome", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), claim(10*ms, fpA, 2, done(1, 8))}, ModelOptions{}},
		{"completed record forgotten before its TTL", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), claim(10*ms, fpA, 2, won)}, ModelOptions{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := porcupine.CheckOperationsTimeout(Model(c.opts), c.h, 5*time.Second)
			want := porcupine.Illegal
			if c.legal {
				want = porcupine.Ok
			}
			if got != want {
				t.Errorf("check = %v, want %v", got, want)
			}
		})
	}
}

// TestModelStaleReplayAfterLateRepair: tiered repairs a final record into
// its fast tier before the claim that read it returns, for up to one more
// TTL; on a loaded machine that claim may return long after the durable
// record expired, and the replay the repair allows must not read as a
// violation. A replay later than that, or on a store without the
// allowance, still is one. A repeated claim by the holder's own token sets
// the lease afresh, so another token's takeover right after it is refused.
func TestModelStaleReplayAfterLateRepair(t *testing.T) {
	const ms = int64(time.Millisecond)
	fpA := idem.Fingerprint{1}
	op := func(in opInput, out opOutput) porcupine.Operation {
		return porcupine.Operation{Input: in, Output: out, Call: in.Call, Return: in.Return}
	}
	claim := func(call, ret int64, tok idem.Token, lease time.Duration, out opOutput) porcupine.Operation {
		return op(opInput{Kind: opClaim, FP: fpA, Token: tok, Lease: lease, TTL: 30 * time.Millisecond, Call: call, Return: ret}, out)
	}
	complete := op(opInput{Kind: opComplete, Token: 1, TTL: 30 * time.Millisecond, Status: idem.StatusSucceeded, Out: 7,
		Call: 5 * ms, Return: 6 * ms}, opOutput{})
	done := opOutput{Rec: recView{Status: idem.StatusSucceeded, FP: fpA, Token: 1, Out: 7}}
	won := opOutput{Claimed: true}
	stale := ModelOptions{StaleReplay: true}
	held := opOutput{Rec: recView{Status: idem.StatusProcessing, FP: fpA, Token: 1, LeaseLeft: 40 * time.Millisecond}}
	cases := []struct {
		name  string
		legal bool
		opts  ModelOptions
		h     []porcupine.Operation
	}{
		{"replay after a late repair", true, stale, []porcupine.Operation{
			claim(0, ms, 1, 10*time.Millisecond, won), complete, claim(20*ms, 100*ms, 2, 10*time.Millisecond, done),
			claim(120*ms, 121*ms, 3, 10*time.Millisecond, done)}},
		{"replay past the repair's TTL", false, stale, []porcupine.Operation{
			claim(0, ms, 1, 10*time.Millisecond, won), complete, claim(20*ms, 100*ms, 2, 10*time.Millisecond, done),
			claim(140*ms, 141*ms, 3, 10*time.Millisecond, done)}},
		{"replay after expiry without the allowance", false, ModelOptions{}, []porcupine.Operation{
			claim(0, ms, 1, 10*time.Millisecond, won), complete, claim(20*ms, 100*ms, 2, 10*time.Millisecond, done),
			claim(120*ms, 121*ms, 3, 10*time.Millisecond, done)}},
		{"own claim again renews the lease", true, ModelOptions{}, []porcupine.Operation{
			claim(0, ms, 1, 10*time.Millisecond, won), claim(15*ms, 16*ms, 1, 50*time.Millisecond, won),
			claim(30*ms, 31*ms, 2, 10*time.Millisecond, held)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := porcupine.CheckOperationsTimeout(Model(c.opts), c.h, 5*time.Second)
			want := porcupine.Illegal
			if c.legal {
				want = porcupine.Ok
			}
			if got != want {
				t.Errorf("check = %v, want %v", got, want)
			}
		})
	}
}

// TestCheckDerivation: a claim under a key, or with a fingerprint, that the
// harness does not derive as the wrapper does is a failure (the probe and
// the model would otherwise check the wrong records).
func TestCheckDerivation(t *testing.T) {
	r := newRun(Plain(), Memory(), Options{Short: true})
	r.tenant, r.st.ShipmentKeys = "t", 2
	r.rec = NewRecorder(memstore.New())
	claim := func(key idem.Key, fp idem.Fingerprint, tok idem.Token) {
		t.Helper()
		req := idem.ClaimRequest{Key: key, Fingerprint: fp, Token: tok, Lease: time.Minute, TTL: time.Hour}
		if _, err := r.rec.Claim(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	key0, fp0 := payKey(r.tenant, 0, false)
	_, conflict0 := payKey(r.tenant, 0, true)
	key1, _ := shipKey(r.tenant, 1)
	claim(key0, fp0, 1)
	claim(key0, conflict0, 2)
	claim(key1, func() idem.Fingerprint { _, fp := shipKey(r.tenant, 1); return fp }(), 3)
	res := &Result{}
	r.checkDerivation(res)
	if len(res.Failures) != 0 {
		t.Fatalf("derived keys and fingerprints: %v", res.Failures)
	}

	var k idem.KeyParts
	k.String("order.ID", orderID(0))
	foreign, _ := k.Key(r.tenant, payOp) // the op part is missing
	claim(foreign, fp0, 4)
	key2, _ := payKey(r.tenant, 2, false)
	claim(key2, fp0, 5) // another order's fingerprint
	claim(key2, fp0, 6) // reported once per key
	res = &Result{}
	r.checkDerivation(res)
	if len(res.Failures) != 2 || !strings.Contains(res.Failures[0], "key derivation drifted") ||
		!strings.Contains(res.Failures[1], "fingerprint derivation drifted") {
		t.Fatalf("want one key and one fingerprint failure, got %q", res.Failures)
	}
}
