package svc

import "context"

// S has defaults but no annotated method, and an op default.
//
//idem:defaults ttl=1h op=shared
type S struct{}

func (s *S) Pay(ctx context.Context, id string) (int, error) { return 0, nil }

// T has a default key that does not fit every method.
//
//idem:defaults key=req.ID ttl=1h
type T struct{}

type Req struct{ ID string }

//idem:hash=req
func (t *T) Good(ctx context.Context, req Req) (int, error) { return 0, nil }

//idem:ttl=2h
func (t *T) Bad(ctx context.Context, id string) (int, error) { return 0, nil }

// U's default ttl is shorter than the retry budget of two methods: each
// error names the method it applies to.
//
//idem:defaults ttl=10s
type U struct{}

//idem:key=id retries=3 timeout=5s
func (u *U) Slow(ctx context.Context, id string) (int, error) { return 0, nil }

//idem:key=id retries=5 timeout=5s
func (u *U) Slower(ctx context.Context, id string) (int, error) { return 0, nil }
