// Package idemgrpc makes gRPC unary calls idempotent by an idempotency-key
// metadata value, as idemhttp does for HTTP with the Idempotency-Key header:
// a server interceptor that claims the key, runs the handler once, stores
// its outcome (the response message's wire bytes, or its status) and
// replays it to retries; and a client interceptor that sends one key per
// logical call, kept across retries and derived from the caller's key
// inside an idempotent call, so that a chain A→B→C deduplicates at every
// hop.
//
// It is its own Go module, so that a service that only uses the core
// runtime does not inherit grpc-go. See README.md for the status table.
package idemgrpc
