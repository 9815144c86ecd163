package idem

import (
	"context"
	"sync/atomic"
)

// CallInfo tells the caller of a wrapped method how its call was answered.
// Get one from WithCallInfo, pass its context to the call, and read it after
// the call returns.
type CallInfo struct {
	replayed atomic.Bool
}

// Replayed reports whether the last call made with the CallInfo's context
// was answered with a stored outcome (a result or a final error) instead of
// running the method: a retry of a call that completed before, or a
// duplicate that waited for the call that ran (Method.Wait). It is false
// when the method ran for this call, and when the call ended in an error
// that is no outcome (ErrInProgress, ErrPayloadMismatch, a store error).
//
// A replayed success is the result of an earlier call: work that must
// happen once per result (an email, a revenue counter) is done by the call
// for which Replayed is false.
func (i *CallInfo) Replayed() bool { return i.replayed.Load() }

// WithCallInfo returns ctx carrying a new CallInfo, which every Do (every
// generated wrapper's call) made with the returned context, or with a
// context derived from it, fills in. Calls that do not use it pay nothing
// for it: no allocation, one context lookup per call.
//
// Use one CallInfo per call, or per sequence of calls read after each: it
// reports the last call that ended. Calls made inside the wrapped method (a
// nested idempotent call, with the method's context) do not fill in their
// caller's CallInfo: the method's context hides it.
func WithCallInfo(ctx context.Context) (context.Context, *CallInfo) {
	c := &infoContext{Context: ctx}
	return c, &c.info
}

// infoContext is the context WithCallInfo returns: one allocation, the
// context and its CallInfo together. The context of a wrapped method, a
// keyContext, hides its caller's CallInfo from nested calls (lookup's
// fInfo: the nearer of the two decides).
type infoContext struct {
	context.Context
	info CallInfo
}

// Value returns the infoContext itself for DoorContextKey (see lookup),
// and asks the caller's context for every other key.
func (c *infoContext) Value(key any) any {
	if key == DoorContextKey {
		return c
	}
	return c.Context.Value(key)
}
