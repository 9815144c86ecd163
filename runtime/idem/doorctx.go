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
const DoorContextKey = "github.com/idemgen/idemgen/runtime/idem.DoorContext"

// value is ctx.Value(key), or, when ctx has none, the value of the
// door's context stored under DoorContextKey.
func value(ctx context.Context, key any) any {
	if v := ctx.Value(key); v != nil {
		return v
	}
	if door, ok := ctx.Value(DoorContextKey).(context.Context); ok && door != ctx {
		return door.Value(key)
	}
	return nil
}
