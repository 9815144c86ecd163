package svc

import "context"

type Msg struct{ id string }

func (m *Msg) ID() string            { return m.id }
func (m Msg) Lookup(k string) string { return k }
func (m Msg) Fail() (string, error)  { return "", nil }

type S struct{}

//idem:key=msg.ID+msg.Lookup()+msg.Fail() ttl=1h
func (s *S) Handle(ctx context.Context, msg Msg) (int, error) { return 0, nil }

//idem:key=msg.id() ttl=1h
func (s *S) Handle2(ctx context.Context, msg *Msg) (int, error) { return 0, nil }

//idem:key="only"+op ttl=1h
func (s *S) Handle3(ctx context.Context, msg *Msg) (int, error) { return 0, nil }
