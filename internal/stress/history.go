package stress

import (
	"context"
	"errors"
	"hash/fnv"
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/runtime/idem"
)

// opKind is the store operation a history entry records.
type opKind uint8

const (
	opClaim opKind = iota + 1
	opComplete
	opRelease
	// opClaimTx is a transactional claim (idem.TxStore.ClaimTx); opCommit is
	// the commit of its transaction with the outcome (idem.Txn.Complete). A
	// rolled-back transaction (idem.Txn.Release) left nothing visible and is
	// not recorded.
	opClaimTx
	opCommit
)

func (k opKind) String() string {
	switch k {
	case opClaim:
		return "claim"
	case opComplete:
		return "complete"
	case opRelease:
		return "release"
	case opClaimTx:
		return "claimTx"
	case opCommit:
		return "commit"
	}
	return "op?"
}

// opInput is what a store operation was asked, as the model sees it. The
// call and return instants are part of the input so that the model can
// bound when a lease may have lapsed or a record expired.
type opInput struct {
	Kind   opKind
	Key    [32]byte
	Text   string // the readable key, for the visualization
	FP     idem.Fingerprint
	Token  idem.Token
	Lease  time.Duration // claim
	TTL    time.Duration // claim, complete
	Status idem.Status   // complete: the outcome's status
	Out    uint64        // complete: digest of the outcome
	Call   int64         // ns since the history's epoch
	Return int64         // ns since the epoch; math.MaxInt64 when the effect is unknown
}

// opOutput is what a store operation answered.
type opOutput struct {
	// Unknown: the store returned an error other than ErrLeaseLost, so the
	// operation may or may not have taken effect (at any time after its call).
	Unknown   bool
	LeaseLost bool // complete, release: ErrLeaseLost
	Claimed   bool
	TakenOver bool
	// Busy: a transactional claim ran out of time waiting for the key's
	// lock (pgstore answers a PROCESSING record with the caller's
	// fingerprint and no token: the holder's claim is not visible yet).
	Busy bool
	Rec  recView // claim refused: the record returned
}

// recView is the part of an idem.Record the model compares.
type recView struct {
	Status    idem.Status
	FP        idem.Fingerprint
	Token     idem.Token
	Out       uint64
	LeaseLeft time.Duration
}

// outcomeDigest hashes everything a store must keep byte for byte.
func outcomeDigest(o idem.Outcome) uint64 {
	h := fnv.New64a()
	var lens [5]byte
	lens[0] = byte(o.Status)
	h.Write(lens[:1])
	for _, b := range [][]byte{o.Body, []byte(o.ErrCode), []byte(o.ErrMessage), o.Meta} {
		n := len(b)
		h.Write([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
		h.Write(b)
	}
	return h.Sum64()
}

// StoreError marks an error returned by the store under test (as opposed to
// ErrLeaseLost, which is an answer). The executor wraps it with %w, so a
// caller's error is classified as a store error with errors.As.
type StoreError struct {
	Op  string
	Err error
}

func (e *StoreError) Error() string { return "store " + e.Op + ": " + e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

type clientKey struct{}

// withClient tags ctx with the id of the worker making the calls (for the
// visualization of a failed history).
func withClient(ctx context.Context, id int) context.Context {
	return context.WithValue(ctx, clientKey{}, id)
}

func clientOf(ctx context.Context) int {
	id, _ := ctx.Value(clientKey{}).(int)
	return id
}

// Recorder is an idem.Store decorator that records every Claim, Complete and
// Release with its inputs, outputs, call and return instants, as a porcupine
// history.
type Recorder struct {
	next  idem.Store
	epoch time.Time
	// OnComplete, when set before the storm, is called after every outcome
	// the store acknowledged (Complete, or a transactional commit).
	OnComplete func(idem.Key)

	mu  sync.Mutex
	ops []porcupine.Operation
}

// NewRecorder returns a recording decorator of next.
func NewRecorder(next idem.Store) *Recorder {
	return &Recorder{next: next, epoch: time.Now()}
}

func (r *Recorder) now() int64 { return int64(time.Since(r.epoch)) }

func (r *Recorder) add(ctx context.Context, in opInput, out opOutput) {
	ret := in.Return
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: clientOf(ctx), Input: in, Output: out, Call: in.Call, Return: ret})
	r.mu.Unlock()
}

// History returns the operations recorded so far.
func (r *Recorder) History() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// Keys returns the IDs of the keys the history touches.
func (r *Recorder) Keys() map[[32]byte]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[[32]byte]string{}
	for _, op := range r.ops {
		in := op.Input.(opInput)
		m[in.Key] = in.Text
	}
	return m
}

// finish fills in the return instant, or marks the effect unknown.
func (r *Recorder) finish(in *opInput, out *opOutput, err error, op string) error {
	in.Return = r.now()
	switch {
	case err == nil:
	case errors.Is(err, idem.ErrLeaseLost) && in.Kind != opClaim:
		out.LeaseLost = true
	default:
		out.Unknown = true
		in.Return = math.MaxInt64
		return &StoreError{Op: op, Err: err}
	}
	return err
}

// Claim implements idem.Store.
func (r *Recorder) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	in := opInput{Kind: opClaim, Key: req.Key.ID, Text: req.Key.Text, FP: req.Fingerprint, Token: req.Token,
		Lease: req.Lease, TTL: req.TTL, Call: r.now()}
	c, err := r.next.Claim(ctx, req)
	var out opOutput
	err = r.finish(&in, &out, err, "claim")
	if err == nil {
		out.Claimed, out.TakenOver = c.Claimed, c.TakenOver
		if !c.Claimed {
			out.Rec = recView{Status: c.Record.Status, FP: c.Record.Fingerprint, Token: c.Record.Token,
				LeaseLeft: c.Record.LeaseLeft}
			if c.Record.Status != idem.StatusProcessing {
				out.Rec.Out = outcomeDigest(c.Record.Outcome)
			}
		}
	}
	r.add(ctx, in, out)
	return c, err
}

// Complete implements idem.Store.
func (r *Recorder) Complete(ctx context.Context, key idem.Key, token idem.Token, o idem.Outcome, ttl time.Duration) error {
	in := opInput{Kind: opComplete, Key: key.ID, Text: key.Text, Token: token, TTL: ttl, Status: o.Status,
		Out: outcomeDigest(o), Call: r.now()}
	err := r.next.Complete(ctx, key, token, o, ttl)
	var out opOutput
	err = r.finish(&in, &out, err, "complete")
	r.add(ctx, in, out)
	if err == nil && r.OnComplete != nil {
		r.OnComplete(key)
	}
	return err
}

// Release implements idem.Store.
func (r *Recorder) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	in := opInput{Kind: opRelease, Key: key.ID, Text: key.Text, Token: token, Call: r.now()}
	err := r.next.Release(ctx, key, token)
	var out opOutput
	err = r.finish(&in, &out, err, "release")
	r.add(ctx, in, out)
	return err
}

var _ idem.Store = (*Recorder)(nil)

// txRecorder is the Recorder of an idem.TxStore: it records ClaimTx and the
// commit of a claimed transaction (Txn.Complete) too.
type txRecorder struct {
	*Recorder
	ts idem.TxStore
}

// recordStore returns the recording decorator of s: a Recorder, which also
// implements idem.TxStore when s does (so that the executor keeps
// transactional mode).
func recordStore(s idem.Store) (*Recorder, idem.Store) {
	r := NewRecorder(s)
	if ts, ok := s.(idem.TxStore); ok {
		return r, &txRecorder{Recorder: r, ts: ts}
	}
	return r, r
}

// ClaimTx implements idem.TxStore.
func (r *txRecorder) ClaimTx(ctx context.Context, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, error) {
	in := opInput{Kind: opClaimTx, Key: req.Key.ID, Text: req.Key.Text, FP: req.Fingerprint, Token: req.Token,
		Lease: req.Lease, TTL: req.TTL, Call: r.now()}
	c, txn, err := r.ts.ClaimTx(ctx, req, wait)
	var out opOutput
	err = r.finish(&in, &out, err, "claim")
	if err == nil {
		out.Claimed, out.TakenOver = c.Claimed, c.TakenOver
		switch {
		case c.Claimed:
			txn = &recTxn{r: r.Recorder, txn: txn, key: req.Key, fp: req.Fingerprint, token: req.Token, client: clientOf(ctx)}
		case c.Record.Status == idem.StatusProcessing && c.Record.Token == 0:
			out.Busy = true
		default:
			out.Rec = recView{Status: c.Record.Status, FP: c.Record.Fingerprint, Token: c.Record.Token,
				LeaseLeft: c.Record.LeaseLeft}
			if c.Record.Status != idem.StatusProcessing {
				out.Rec.Out = outcomeDigest(c.Record.Outcome)
			}
		}
	}
	r.add(ctx, in, out)
	return c, txn, err
}

// recTxn records the commit of a claimed transaction.
type recTxn struct {
	r      *Recorder
	txn    idem.Txn
	key    idem.Key
	fp     idem.Fingerprint
	token  idem.Token
	client int
}

func (t *recTxn) Context(ctx context.Context) context.Context { return t.txn.Context(ctx) }

func (t *recTxn) Complete(ctx context.Context, o idem.Outcome, ttl time.Duration, discardWrites bool) error {
	in := opInput{Kind: opCommit, Key: t.key.ID, Text: t.key.Text, FP: t.fp, Token: t.token, TTL: ttl,
		Status: o.Status, Out: outcomeDigest(o), Call: t.r.now()}
	err := t.txn.Complete(ctx, o, ttl, discardWrites)
	var out opOutput
	err = t.r.finish(&in, &out, err, "commit")
	t.r.add(withClient(ctx, t.client), in, out)
	if err == nil && t.r.OnComplete != nil {
		t.r.OnComplete(t.key)
	}
	return err
}

// Release rolls the transaction back: nothing becomes visible, nothing is
// recorded. Its error is still a store error.
func (t *recTxn) Release(ctx context.Context) error {
	if err := t.txn.Release(ctx); err != nil {
		return &StoreError{Op: "rollback", Err: err}
	}
	return nil
}

var _ idem.TxStore = (*txRecorder)(nil)

// Tweak is an idem.Store decorator that shortens the lease and TTL of chosen
// keys, so that a scenario can make leases lapse and records expire within a
// run while the generated wrapper keeps its annotated values.
type Tweak struct {
	next idem.Store
	// Rule returns the lease and TTL to use for key (0 keeps the requested
	// one); ok is false for keys left alone.
	Rule func(key idem.Key) (lease, ttl time.Duration, ok bool)
}

// Claim implements idem.Store.
func (t *Tweak) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	return t.next.Claim(ctx, t.request(req))
}

// Complete implements idem.Store.
func (t *Tweak) Complete(ctx context.Context, key idem.Key, token idem.Token, o idem.Outcome, ttl time.Duration) error {
	if t.Rule != nil {
		if _, d, ok := t.Rule(key); ok && d > 0 {
			ttl = d
		}
	}
	return t.next.Complete(ctx, key, token, o, ttl)
}

// Release implements idem.Store.
func (t *Tweak) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	return t.next.Release(ctx, key, token)
}

func (t *Tweak) request(req idem.ClaimRequest) idem.ClaimRequest {
	if t.Rule != nil {
		if lease, ttl, ok := t.Rule(req.Key); ok {
			if ttl > 0 {
				req.TTL = ttl
			}
			if lease > 0 {
				req.Lease = lease
			}
			req.Lease = min(req.Lease, req.TTL)
		}
	}
	return req
}

// txTweak is the Tweak of an idem.TxStore.
type txTweak struct {
	*Tweak
	ts idem.TxStore
}

// ClaimTx implements idem.TxStore; the commit's TTL is tweaked by txnTweak.
func (t *txTweak) ClaimTx(ctx context.Context, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, error) {
	req = t.request(req)
	c, txn, err := t.ts.ClaimTx(ctx, req, wait)
	if txn != nil {
		txn = &txnTweak{Txn: txn, ttl: req.TTL, tweaked: t.Rule != nil && t.tweaked(req.Key)}
	}
	return c, txn, err
}

func (t *Tweak) tweaked(k idem.Key) bool {
	_, ttl, ok := t.Rule(k)
	return ok && ttl > 0
}

type txnTweak struct {
	idem.Txn
	ttl     time.Duration
	tweaked bool
}

func (t *txnTweak) Complete(ctx context.Context, o idem.Outcome, ttl time.Duration, discardWrites bool) error {
	if t.tweaked {
		ttl = t.ttl
	}
	return t.Txn.Complete(ctx, o, ttl, discardWrites)
}

// tweakStore returns the Tweak of next, an idem.TxStore when next is one.
func tweakStore(next idem.Store, rule func(idem.Key) (time.Duration, time.Duration, bool)) idem.Store {
	t := &Tweak{next: next, Rule: rule}
	if ts, ok := next.(idem.TxStore); ok {
		return &txTweak{Tweak: t, ts: ts}
	}
	return t
}
