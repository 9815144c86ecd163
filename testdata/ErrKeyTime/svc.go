package svc

import (
	"context"
	"time"
)

// Stamp gets time.Time's String and MarshalText by embedding: they carry
// the location (and String the monotonic reading), not the instant.
type Stamp struct{ time.Time }

// Local is its own type: its String is the user's choice.
type Local time.Time

func (l Local) String() string { return time.Time(l).Format(time.DateOnly) }

type S struct{}

//idem:key=at+day+n ttl=1h
func (s *S) Pay(ctx context.Context, at Stamp, day Local, n float32) (int, error) { return 0, nil }
