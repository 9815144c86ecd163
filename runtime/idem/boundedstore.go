package idem

import "time"

// BoundedStore is implemented by stores that can tell whether their calls
// return promptly once their context's deadline has passed (redisstore
// judges it from its client's options). runtime/tiered calls a fast store
// on the caller's goroutine, with its fast timeout as the deadline, when
// BoundedBy(that timeout) is true, and on a goroutine it can stop waiting
// for otherwise; the executor does not use it.
type BoundedStore interface {
	// BoundedBy reports whether every call returns within about d of its
	// context's deadline (including the wait for a connection, a dial and
	// retries). False when the store cannot tell.
	BoundedBy(d time.Duration) bool
}
