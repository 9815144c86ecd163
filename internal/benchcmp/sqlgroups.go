package benchcmp

import (
	"context"

	"github.com/idemgen/idemgen/internal/benchcmp/orders"
	"github.com/idemgen/idemgen/runtime/idem"
)

// floor is a hand-written first call a group compares the wrapper with.
type floor struct {
	name   string // the variant's name
	source string // appended to the mode's name, names its orders (Env.fresh)
	run    func(ctx context.Context, svc *orders.Service, o *orders.Order) error
}

// sqlMode is one mode of a SQL store: the groups' name ("postgres lease"),
// its store (newStore returns a new one on the same table each call), and
// the floors of a first call, in table order.
type sqlMode struct {
	name     string
	newStore func() idem.Store
	floors   []floor
}

// sqlStore is what differs between the groups of the SQL stores
// (PostgreSQL, MySQL): the service on the store's database, its round-trip
// counters, its modes, the floor that decides the keys of the replay floor
// (seed), the replay floor itself, and whether a cold replay is measured
// (at one caller only: see coldReplay).
type sqlStore struct {
	svc      *orders.Service
	counters func() []Counter
	modes    []sqlMode
	seed     func(ctx context.Context, svc *orders.Service, o *orders.Order) error
	replay   func(ctx context.Context, o *orders.Order) error
	cold     bool
}

// sqlGroups builds, for each mode of s, a first call (the wrapper against
// the mode's floors) and a replay (the wrapper against one SELECT and
// json.Unmarshal), and with s.cold at one caller a cold replay.
func (e *Env) sqlGroups(callers int, s sqlStore) ([]Group, error) {
	ctx := e.Ctx
	var gs []Group
	for _, m := range s.modes {
		newSvc := func() *orders.IdempotentService {
			return orders.NewIdempotentService(s.svc, idem.NewExecutor(m.newStore(), idem.SingleTenant()))
		}
		wsvc := newSvc()
		variants := []Variant{framework(ctx, "wrapper", wsvc, e.fresh(m.name+"-fw"))}
		for _, f := range m.floors {
			src := e.fresh(m.name + f.source)
			variants = append(variants, Variant{Name: f.name, Prepare: src.prepare,
				Op: func(i int) error { return f.run(ctx, s.svc, src.batch[i]) }})
		}
		gs = append(gs, Group{Name: m.name + "/first", Callers: callers, Counters: s.counters(), Variants: variants})
		ros := e.fixed(m.name, 256)
		rfw, err := replayFramework(ctx, "wrapper", wsvc, ros)
		if err != nil {
			return nil, err
		}
		fos := e.fixed(m.name+"-floor", 256)
		for _, o := range fos {
			if err := s.seed(ctx, s.svc, o); err != nil {
				return nil, err
			}
		}
		replay := Variant{Name: "SELECT, json.Unmarshal", Op: func(i int) error { return s.replay(ctx, fos[i%len(fos)]) }}
		gs = append(gs, Group{Name: m.name + "/replay", Callers: callers, Counters: s.counters(), Variants: []Variant{rfw, replay}})
		if s.cold && callers == 1 {
			cold, err := e.coldReplay(ctx, m.name, newSvc)
			if err != nil {
				return nil, err
			}
			gs = append(gs, Group{Name: m.name + "/replay cold", Callers: callers, Counters: s.counters(), Variants: []Variant{cold, replay}})
		}
	}
	return gs, nil
}
