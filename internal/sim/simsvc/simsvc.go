// Package simsvc is the service the simulator (internal/sim) drives through
// its generated wrapper (idem_gen.go, from `go run ./cmd/idemgen
// ./internal/sim/simsvc`): the same path a user's annotated method takes.
// What each method does is up to the simulator, through Service.Body.
package simsvc

//go:generate go run github.com/idemgen/idemgen/cmd/idemgen

import (
	"context"
	"errors"
)

// ErrRejected is a final (business) error: stored and replayed.
var ErrRejected = errors.New("rejected")

// Request is one call's input: Key is the idempotency key, Payload the rest
// of the request (a retry with another Payload is a different request).
type Request struct {
	Key     string `json:"key"`
	Payload int64  `json:"payload"`
}

// Result is a method's result. The simulator writes which execution produced
// it and for which payload, so that every replay can be traced back to the
// execution it claims to replay; X may be NaN, which JSON cannot encode.
type Result struct {
	Key     string  `json:"key"`
	Payload int64   `json:"payload"`
	Exec    int64   `json:"exec"`
	X       float64 `json:"x"`
}

// Service runs Body for every method; the methods differ only by their
// annotations.
type Service struct {
	Body func(ctx context.Context, method string, req Request) (*Result, error)
}

// Pay keeps its outcome long after a schedule ends, and rejects a duplicate
// of a running call at once.
//
//idem:key=req.Key ttl=1h lease=1s final=ErrRejected
func (s *Service) Pay(ctx context.Context, req Request) (*Result, error) {
	return s.Body(ctx, "Pay", req)
}

// Brief keeps its outcome a few seconds, so records expire within a schedule.
//
//idem:key=req.Key ttl=3s lease=1s final=ErrRejected
func (s *Service) Brief(ctx context.Context, req Request) (*Result, error) {
	return s.Body(ctx, "Brief", req)
}

// Await lets a duplicate wait for a running call and replay its outcome.
//
//idem:key=req.Key ttl=1h lease=1s inflight=wait:2s final=ErrRejected
func (s *Service) Await(ctx context.Context, req Request) (*Result, error) {
	return s.Body(ctx, "Await", req)
}
