package svc

import (
	"context"
	"errors"
)

var (
	ErrClosed  = errors.New("closed")
	NotAnError = 42
)

const ErrConst = "nope"

type S struct{}

//idem:key=id ttl=1h final=ErrClosed|NotAnError|ErrConst|ErrMissing|errors.ErrUnsupported|io.EOF
func (s *S) Pay(ctx context.Context, id string) (int, error) { return 0, nil }
