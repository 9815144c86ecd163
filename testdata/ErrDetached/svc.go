package svc

import "context"

type S struct {
	//idem:key=id ttl=1h
	Field string
}

//idem:key=id ttl=1h

func (s *S) Pay(ctx context.Context, id string) (int, error) { return 0, nil }

//idem:key=id ttl=1h
func Plain(ctx context.Context, id string) (int, error) { return 0, nil }

// idem:key=id ttl=1h
func (s *S) Typo(ctx context.Context, id string) (int, error) { return 0, nil }
