// Package mutant switches on known mistakes in the runtime, so that tests can
// show that the simulator (internal/sim) finds them. A mutation travels in a
// context: only a test that builds the context with With turns one on.
//
// The runtime consults mutations only when built with the tag idemmutant
// (make test and make sim pass it): runtime/idem and runtime/memstore keep
// their hooks in files of that tag, so a shipped binary neither imports this
// package nor pays a lookup for it (TestShippedImportsNoMutant). Without
// the tag, Planted is false and the hooks are the constant false.
//
// It is internal to the module: no user of idemgen can switch one on.
package mutant

import "context"

// Flag is a set of mutations.
type Flag uint32

const (
	// ReleaseAfterFinal: the executor releases the key after a final
	// (business) error instead of storing it (runtime/idem).
	ReleaseAfterFinal Flag = 1 << iota
	// CompleteWithoutFencing: the store's Complete ignores the fencing token
	// and the record's status, so a zombie overwrites the outcome
	// (runtime/memstore).
	CompleteWithoutFencing
	// LostCompleteReplyAsLeaseLost: the executor treats a failed Complete
	// (a lost reply) as a lost lease instead of retrying it (runtime/idem).
	LostCompleteReplyAsLeaseLost
	// TakeoverWithoutFingerprint: the store's Claim takes over a lapsed
	// lease whatever the payload's fingerprint (runtime/memstore).
	TakeoverWithoutFingerprint
	// QuickCompleteGiveUp: the executor gives up storing an outcome after
	// its few quick attempts when the store cannot be reached, instead of
	// trying for as long as its claim can be live (runtime/idem).
	QuickCompleteGiveUp
	// OutageAsRefusal: the executor takes a store error that can pass (an
	// outage: a read-only database, a full disk, a store it cannot reach)
	// for a refusal when storing an outcome, and stores the "not stored"
	// substitute, or gives up when that is refused too (runtime/idem).
	OutageAsRefusal
	// ReleaseOutageGiveUp: the executor gives up a Release the store could
	// not take because of an outage (a method that failed transiently,
	// panicked or was cancelled), instead of sending it again in the
	// background, so that the claim stays PROCESSING for the rest of its
	// lease (runtime/idem).
	ReleaseOutageGiveUp
)

// All returns every mutation, in declaration order.
func All() []Flag {
	return []Flag{ReleaseAfterFinal, CompleteWithoutFencing, LostCompleteReplyAsLeaseLost, TakeoverWithoutFingerprint, QuickCompleteGiveUp, OutageAsRefusal, ReleaseOutageGiveUp}
}

func name(f Flag) string {
	switch f {
	case ReleaseAfterFinal:
		return "release-after-final"
	case CompleteWithoutFencing:
		return "complete-without-fencing"
	case LostCompleteReplyAsLeaseLost:
		return "lost-complete-reply-as-lease-lost"
	case TakeoverWithoutFingerprint:
		return "takeover-without-fingerprint"
	case QuickCompleteGiveUp:
		return "quick-complete-give-up"
	case OutageAsRefusal:
		return "outage-as-refusal"
	case ReleaseOutageGiveUp:
		return "release-outage-give-up"
	}
	return "unknown"
}

// String returns the names of the mutations in f, joined by '+'; "none"
// for the empty set.
func (f Flag) String() string {
	s := ""
	all := All()
	for _, m := range all {
		if f&m != 0 {
			if s != "" {
				s += "+"
			}
			s += name(m)
		}
	}
	if rest := f &^ (1<<len(all) - 1); rest != 0 {
		if s != "" {
			s += "+"
		}
		s += "unknown"
	}
	if s == "" {
		return "none"
	}
	return s
}

type ctxKey struct{}

// With returns ctx with the mutations f switched on, in addition to those
// ctx already carries.
func With(ctx context.Context, f Flag) context.Context {
	return context.WithValue(ctx, ctxKey{}, From(ctx)|f)
}

// From returns the mutations ctx carries (none for a context without any).
func From(ctx context.Context) Flag {
	f, _ := ctx.Value(ctxKey{}).(Flag)
	return f
}

// On reports whether ctx switches on every mutation in f.
func On(ctx context.Context, f Flag) bool {
	return f != 0 && From(ctx)&f == f
}
