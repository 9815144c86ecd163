package stress

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
)

// TestStorm runs every scenario, shortened, on the memory store, and on
// Redis when $IDEM_REDIS_ADDR is set.
func TestStorm(t *testing.T) {
	backends := []Backend{Memory()}
	for _, b := range backends {
		for _, sc := range Scenarios() {
			t.Run(sc.Name+"/"+b.Name, func(t *testing.T) { runScenario(t, sc, b) })
		}
	}
}

func TestStormRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	b := Redis(testenv.RedisAddr(t))
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) { runScenario(t, sc, b) })
	}
}

func runScenario(t *testing.T, sc Scenario, b Backend) {
	t.Helper()
	res, err := Run(t.Context(), sc, b, Options{Short: true, VizDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Line())
	for _, f := range res.Failures {
		t.Error(f)
	}
}

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

	cases := []struct {
		name  string
		legal bool
		h     []porcupine.Operation
	}{
		{"claim, refuse, complete, replay", true, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(5*ms, fpA, 2, held(fpA, 1)), complete(10*ms, 1, 7, ok), claim(20*ms, fpA, 3, done(1, 7))}},
		{"takeover after the lease, zombie fenced", true, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(200*ms, fpA, 2, tookOver), complete(210*ms, 1, 7, lost), complete(220*ms, 2, 8, ok), claim(230*ms, fpB, 3, done(2, 8))}},
		{"a store error may or may not have claimed", true, []porcupine.Operation{
			claim(0, fpA, 1, opOutput{Unknown: true}), claim(5*ms, fpA, 2, won)}},
		{"release then claim again", true, []porcupine.Operation{
			claim(0, fpA, 1, won), release(5*ms, 1, ok), claim(10*ms, fpB, 2, won)}},

		{"claim on an absent key refused", false, []porcupine.Operation{
			claim(0, fpA, 1, held(fpA, 9))}},
		{"two claims of a free key both win", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(5*ms, fpA, 2, won)}},
		{"takeover of a live lease", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(10*ms, fpA, 2, tookOver)}},
		{"takeover under another payload", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(500*ms, fpB, 2, tookOver)}},
		{"lapsed lease refused long after", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(500*ms, fpA, 2, held(fpA, 1))}},
		{"refusal with a wrong token", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(5*ms, fpA, 2, held(fpA, 7))}},
		{"stale token completes", false, []porcupine.Operation{
			claim(0, fpA, 1, won), claim(200*ms, fpA, 2, tookOver), complete(210*ms, 1, 7, ok)}},
		{"holder's complete refused", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, lost)}},
		{"completed record overwritten", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), complete(10*ms, 1, 8, ok)}},
		{"completed record released", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), release(10*ms, 1, ok)}},
		{"replay of another outcome", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), claim(10*ms, fpA, 2, done(1, 8))}},
		{"completed record forgotten before its TTL", false, []porcupine.Operation{
			claim(0, fpA, 1, won), complete(5*ms, 1, 7, ok), claim(10*ms, fpA, 2, won)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := porcupine.CheckOperationsTimeout(Model(false), c.h, 5*time.Second)
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
