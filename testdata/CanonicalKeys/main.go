// CanonicalKeys: a time.Time key part is its instant, so a retry that
// decoded the same instant from JSON in another zone (no monotonic reading)
// replays; a nil pointer inside an interface key part is ErrMissingKey, not
// a panic.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Ref is a Stringer with a pointer receiver that would panic on nil.
type Ref struct{ id string }

func (r *Ref) String() string { return r.id }

type Slot struct {
	Start *time.Time
	Room  string
}

// Deadline is defined as time.Time, without a String method of its own: it
// is keyed by its instant too.
type Deadline time.Time

type Booker struct{ runs int }

//idem:key=at+slot.Start+slot.Room ttl=1h
func (b *Booker) Book(ctx context.Context, at time.Time, slot *Slot) (string, error) {
	b.runs++
	return fmt.Sprintf("booking %d", b.runs), nil
}

//idem:key=ref ttl=1h
func (b *Booker) Cancel(ctx context.Context, ref fmt.Stringer) (string, error) {
	b.runs++
	return "cancelled " + ref.String(), nil
}

type times struct{ At, Start time.Time }

// fromJSON is what a retry that arrives as JSON decodes.
func fromJSON(at, start time.Time) times {
	wire, err := json.Marshal(times{at, start})
	if err != nil {
		panic(err)
	}
	var t times
	if err := json.Unmarshal(wire, &t); err != nil {
		panic(err)
	}
	return t
}

//idem:key=d ttl=1h hash=none
func (b *Booker) Remind(ctx context.Context, d Deadline) (string, error) {
	b.runs++
	return fmt.Sprintf("reminder %d", b.runs), nil
}

func main() {
	ctx := context.Background()
	b := &Booker{}
	w := NewIdempotentBooker(b, idem.NewExecutor(memstore.New(), idem.WithObserver(func(ev idem.Event) {
		if ev.Kind == idem.EventClaimed {
			fmt.Println("  key:", ev.Key.Text)
		}
	}), idem.SingleTenant()))
	// 2026-03-01 09:30 UTC, in the local zone, with a monotonic reading (as
	// time.Now gives).
	now := time.Now()
	at := now.Add(time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC).Sub(now))
	start := at.Add(time.Hour).Round(0)
	out, err := w.Book(ctx, at, &Slot{Start: &start, Room: "A"})
	fmt.Println(out, err)

	// The retry arrives as JSON: no monotonic reading, another location
	// value; the same instant is the same key, and it replays.
	again := fromJSON(at, start)
	out, err = w.Book(ctx, again.At, &Slot{Start: &again.Start, Room: "A"})
	fmt.Println("retry from JSON:", out, err, "runs:", b.runs)

	// In another zone it is the same key and the same payload (the same
	// instants): the retry replays.
	cet := fromJSON(at.In(time.FixedZone("CET", 3600)), start.In(time.FixedZone("EST", -5*3600)))
	out, err = w.Book(ctx, cet.At, &Slot{Start: &cet.Start, Room: "A"})
	fmt.Println("retry from JSON in another zone:", out, err, "runs:", b.runs)

	later := again.Start.Add(time.Nanosecond)
	out, err = w.Book(ctx, again.At, &Slot{Start: &later, Room: "A"})
	fmt.Println("one nanosecond later:", out, err)

	_, err = w.Book(ctx, again.At, &Slot{Room: "A"})
	fmt.Println("no start:", errors.Is(err, idem.ErrMissingKey), err)
	_, err = w.Book(ctx, time.Time{}, &Slot{Start: &start, Room: "A"})
	fmt.Println("zero time:", errors.Is(err, idem.ErrMissingKey), err)

	d := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	first, _ := w.Remind(ctx, Deadline(d))
	second, _ := w.Remind(ctx, Deadline(d.In(time.FixedZone("IST", 19800))))
	fmt.Println("deadline in two zones:", first, second)

	out, err = w.Cancel(ctx, &Ref{id: "r1"})
	fmt.Println(out, err)
	var none *Ref
	_, err = w.Cancel(ctx, none)
	fmt.Println("typed nil:", errors.Is(err, idem.ErrMissingKey), err)
	_, err = w.Cancel(ctx, nil)
	fmt.Println("nil:", errors.Is(err, idem.ErrMissingKey), err)
}
