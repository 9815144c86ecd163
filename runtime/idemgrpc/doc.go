// Package idemgrpc makes gRPC unary calls idempotent by an idempotency-key
// metadata value, as idemhttp does for HTTP with the Idempotency-Key header:
// a server interceptor that claims the key, runs the handler once, stores
// its outcome (the response message's wire bytes, or its status) and
// replays it to retries; and a client interceptor that sends one key per
// logical call, kept across retries and derived from the caller's key
// inside an idempotent call, so that a chain A→B→C deduplicates at every
// hop.
//
// As an edge, the server interceptor:
//
//   - puts the tenant WithTenant names in the handler's context
//     (idem.ContextWithTenant), so generated wrappers the handler calls
//     scope their records by it;
//   - runs the handler without the client's cancellation but with its
//     deadline, bounded by WithHandlerTimeout, renewing its lease while it
//     runs where the store can;
//   - marks every refusal it answers with a google.rpc.ErrorInfo of
//     ErrorDomain (Refusal reads it), and never stores such a refusal that
//     a handler passed through from a downstream service;
//   - answers store failures with the rule, never the store's error text,
//     which it logs (WithLogger);
//   - reports in RetryInfo the expected wait (WithExpectedRun), not the
//     lease left.
//
// The client interceptor derives one key per downstream call of a method
// within a call (the n-th call its own key), the same keys again on a retry
// of the call.
//
// It is its own Go module, so that a service that only uses the core
// runtime does not inherit grpc-go. See README.md for the status table and
// docs/decisions/grpc-consumer-edges.md for the choices.
package idemgrpc
