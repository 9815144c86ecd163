package svc

import (
	"context"
	"net/http"
)

type Hooks struct {
	onDone func()
}

type Req struct {
	ID    string
	hooks *Hooks
}

type S struct{}

//idem:key=req.ID ttl=1h
func (s *S) Pay(ctx context.Context, req Req) (int, error) { return 0, nil }

//idem:key=id ttl=1h hash=id,client
func (s *S) Fetch(ctx context.Context, id string, client *http.Client) (int, error) { return 0, nil }

// Leaving the parameter out of the fingerprint is the way out.
//
//idem:key=req.ID ttl=1h hash=n
func (s *S) Fine(ctx context.Context, req Req, n int) (int, error) { return 0, nil }
