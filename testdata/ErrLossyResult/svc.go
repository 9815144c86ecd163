package svc

import (
	"context"
	"encoding/json"
)

type Receipt struct {
	ID    string
	total int
}

type Line struct {
	SKU  string
	Cost int `json:"-"`
}

type Order struct {
	ID    string
	Lines []Line
}

type inner struct{ n int }

type Embeds struct {
	inner
	ID string
}

// Sealed has unexported state and a marshaler pair of its own: fine.
type Sealed struct{ n int }

func (s Sealed) MarshalJSON() ([]byte, error) { return json.Marshal(s.n) }

func (s *Sealed) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &s.n) }

// Dash has a field named "-" in JSON (json:"-,"): it is carried.
type Dash struct {
	X int `json:"-,"`
}

type S struct{}

//idem:key=id ttl=1h
func (s *S) Pay(ctx context.Context, id string) (*Receipt, error) { return nil, nil }

//idem:key=id ttl=1h
func (s *S) Place(ctx context.Context, id string) (map[string]Order, error) { return nil, nil }

//idem:key=id ttl=1h
func (s *S) Embedded(ctx context.Context, id string) (Embeds, error) { return Embeds{}, nil }

//idem:key=id ttl=1h
func (s *S) Fine(ctx context.Context, id string) ([]Sealed, error) { return nil, nil }

//idem:key=id ttl=1h
func (s *S) Dashed(ctx context.Context, id string) (Dash, error) { return Dash{}, nil }
