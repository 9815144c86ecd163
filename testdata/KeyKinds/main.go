// KeyKinds: every key-able kind: a fmt.Stringer, an encoding.TextMarshaler,
// signed and unsigned integers of named types, a bool, a byte array (a UUID)
// and a named string type.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// OrderNo is a Stringer.
type OrderNo struct{ n int }

func (o OrderNo) String() string { return fmt.Sprintf("ORD-%04d", o.n) }

// Day is a TextMarshaler.
type Day struct{ y, m, d int }

func (d Day) MarshalText() ([]byte, error) {
	if d.y == 0 {
		return nil, errors.New("no date")
	}
	return fmt.Appendf(nil, "%04d-%02d-%02d", d.y, d.m, d.d), nil
}

type (
	Shard  uint16
	Region string
	UUID   [16]byte
	Level  int8
)

type Job struct {
	No     OrderNo
	Day    Day
	Shard  Shard
	Region Region
	ID     UUID
	Prio   Level
	Urgent bool
}

type Scheduler struct{ runs int }

//idem:key=job.No+job.Day+job.Shard+job.Region+job.ID+job.Prio+job.Urgent+attempt ttl=1h
func (s *Scheduler) Run(ctx context.Context, job *Job, attempt uint) (string, error) {
	s.runs++
	return fmt.Sprintf("run %d", s.runs), nil
}

func main() {
	ctx := context.Background()
	s := &Scheduler{}
	w := NewIdempotentScheduler(s, idem.NewExecutor(memstore.New(), idem.WithObserver(func(ev idem.Event) {
		if ev.Kind == idem.EventClaimed {
			fmt.Println("  key:", ev.Key.Text)
		}
	}), idem.SingleTenant()))
	job := &Job{No: OrderNo{7}, Day: Day{2026, 3, 1}, Shard: 9, Region: "eu", ID: UUID{0: 0xab, 15: 0xcd}, Prio: -2, Urgent: true}
	for range 2 {
		out, err := w.Run(ctx, job, 1)
		fmt.Println(out, err)
	}
	other := *job
	other.Urgent = false
	out, err := w.Run(ctx, &other, 1)
	fmt.Println("not urgent:", out, err)

	noDay := *job
	noDay.Day = Day{}
	_, err = w.Run(ctx, &noDay, 1)
	fmt.Println("bad day:", err)
	noID := *job
	noID.ID = UUID{}
	_, err = w.Run(ctx, &noID, 1)
	fmt.Println("zero UUID:", errors.Is(err, idem.ErrMissingKey), err)
	fmt.Println("runs:", s.runs)
}
