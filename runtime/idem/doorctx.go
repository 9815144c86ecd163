package idem

import "context"

// DoorContextKey is the string key under which a door stores its handler
// context in a framework's own context when that one answers Value only
// for string keys: gin's *gin.Context, without
// gin.Engine.ContextWithFallback, reaches its c.Keys (c.Set) and nothing
// of c.Request.Context(). Every value the runtime reads from a context
// (the door's tenant, the decisions, an open transaction, a call's key
// and observer) falls back to the context stored there when ctx itself
// has none, so that a handler that passes such a framework context to a
// generated wrapper is scoped by the door's tenant as one that passes the
// request's context. runtime/idemgin sets it; a door for another such
// framework does the same.
//
// The contexts the runtime derives (ContextWithTenant, WithDecisions,
// WithCallInfo, ContextWithKey and the executor's own) answer Value for
// this key with themselves, so that one walk of a context's chain finds
// every value of the runtime, and a door's context, or learns that there
// is none (see callState).
const DoorContextKey = "github.com/idemgen/idemgen/runtime/idem.DoorContext"

// fields is a set of the values the runtime reads from a context.
type fields uint8

const (
	fTenant    fields = 1 << iota // ContextWithTenant
	fDecisions                    // WithDecisions, or hidden by a Do's method context
	fInfo                         // the nearest CallInfo or method context (which hides a CallInfo)
	fKey                          // the nearest method context (ContextWithKey)
	fTxn                          // the open transaction (withOpenTxn)
	fObserver                     // the call's CallObserver (hook.go)
)

// maxDoorHops bounds how many door contexts one lookup follows (a door's
// context is the request's, which has none: one is the rule; a framework
// context that names itself as its door stops there).
const maxDoorHops = 4

// callState is what the runtime reads from a call's context, found in one
// walk of its chain (see lookup): each field from the nearest context that
// sets it, as ctx.Value would find it.
type callState struct {
	found     fields
	tenant    string
	decisions *Decisions
	info      *CallInfo   // nil also when a method context is nearer
	key       *keyContext // the nearest method context
	txn       Txn
	observer  CallObserver
}

// lookup reads the fields of want from ctx's chain: one ctx.Value walk for
// DoorContextKey, which each of the runtime's contexts answers with
// itself, resumed from its parent until want is found or the chain ends. A
// door's context found on the way (a framework context that holds the
// request's under DoorContextKey) is where the walk goes on: the fields
// that ctx's chain does not set up to there are the door context's. A
// context that carries none of the runtime's values costs one walk.
func lookup(ctx context.Context, want fields) (s callState) {
	for hops := 0; ctx != nil && s.found&want != want; {
		switch c := ctx.Value(DoorContextKey).(type) {
		case *valueContext:
			s.take(c)
			ctx = c.Context
		case *keyContext:
			if s.found&fInfo == 0 {
				s.found |= fInfo // the method's context hides its caller's CallInfo
			}
			if s.found&fKey == 0 {
				s.found |= fKey
				s.key = c
			}
			ctx = c.Context
		case *infoContext:
			if s.found&fInfo == 0 {
				s.found |= fInfo
				s.info = &c.info
			}
			ctx = c.Context
		case context.Context:
			// A door's context (DoorContextKey). Not compared with ctx (a
			// framework's context may be of an uncomparable type): one
			// that names itself ends at the bound.
			if hops >= maxDoorHops {
				return s
			}
			hops++
			ctx = c
		default:
			return s
		}
	}
	return s
}

// take sets the field c carries, unless a nearer context set it.
func (s *callState) take(c *valueContext) {
	if s.found&c.field != 0 {
		return
	}
	s.found |= c.field
	switch c.field {
	case fTenant:
		s.tenant = c.tenant
	case fDecisions:
		s.decisions, _ = c.val.(*Decisions)
	case fTxn:
		s.txn, _ = c.val.(Txn)
	case fObserver:
		s.observer, _ = c.val.(CallObserver)
	}
}

// valueContext is context.WithValue for one of the runtime's fields (a
// tenant, a Decisions cell, an open transaction, a CallObserver): one
// allocation, where context.WithValue boxes a tenant string in a second.
type valueContext struct {
	context.Context
	field  fields
	tenant string // fTenant
	val    any    // the other fields' value
}

// Value returns c itself for DoorContextKey (see lookup), and asks the
// parent for every other key.
func (c *valueContext) Value(key any) any {
	if key == DoorContextKey {
		return c
	}
	return c.Context.Value(key)
}

// withField returns ctx carrying val (or tenant) as field f.
func withField(ctx context.Context, f fields, tenant string, val any) context.Context {
	return &valueContext{Context: ctx, field: f, tenant: tenant, val: val}
}
