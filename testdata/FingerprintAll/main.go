// FingerprintAll: the fingerprint sees every field the method sees: an
// unexported field, a json:"-" field, invalid UTF-8 bytes, a field behind a
// pointer; a retry that differs only there is ErrPayloadMismatch, not a
// replay of another request's result.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Transfer is flat: hashed field by field.
type Transfer struct {
	ID     string
	Amount int64
	memo   string
	Note   string `json:"-"`
}

// Batch is not flat: hashed by idem.Hasher.Value.
type Batch struct {
	ID    string
	Items []Transfer
	At    time.Time
	owner *string
}

// Gateway holds a function, which a fingerprint cannot compare, and says
// itself what counts (idem.Fingerprinter).
type Gateway struct {
	Name    string
	onRetry func()
}

func (g *Gateway) IdemFingerprint() ([]byte, error) { return []byte(g.Name), nil }

type Bank struct{ runs int }

//idem:key=id ttl=1h
func (b *Bank) Route(ctx context.Context, id string, gw Gateway) (string, error) {
	b.runs++
	return "routed via " + gw.Name, nil
}

//idem:key=t.ID ttl=1h
func (b *Bank) Send(ctx context.Context, t Transfer) (string, error) {
	b.runs++
	return fmt.Sprintf("sent %d %s %q", t.Amount, t.memo, t.Note), nil
}

//idem:key=batch.ID ttl=1h
func (b *Bank) SendAll(ctx context.Context, batch *Batch) (int, error) {
	b.runs++
	return len(batch.Items), nil
}

func main() {
	ctx := context.Background()
	b := &Bank{}
	w := NewIdempotentBank(b, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	send := func(what string, t Transfer) {
		out, err := w.Send(ctx, t)
		fmt.Printf("%s: %s %v mismatch=%v\n", what, out, err, errors.Is(err, idem.ErrPayloadMismatch))
	}
	t := Transfer{ID: "t1", Amount: 5, memo: "rent", Note: "\xff"}
	send("first", t)
	send("same", t)
	other := t
	other.memo = "gift"
	send("unexported field differs", other)
	other = t
	other.Note = "\xfe"
	send(`json:"-" field differs (another invalid byte)`, other)

	owner, thief := "ann", "bob"
	batch := &Batch{ID: "b1", Items: []Transfer{t}, At: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), owner: &owner}
	n, err := w.SendAll(ctx, batch)
	fmt.Println("batch:", n, err)
	same := *batch
	same.At = same.At.In(time.UTC)
	n, err = w.SendAll(ctx, &same)
	fmt.Println("batch again:", n, err)
	changed := *batch
	changed.owner = &thief
	_, err = w.SendAll(ctx, &changed)
	fmt.Println("batch, unexported pointer differs:", errors.Is(err, idem.ErrPayloadMismatch))
	changed = *batch
	changed.Items = []Transfer{other}
	_, err = w.SendAll(ctx, &changed)
	fmt.Println("batch, nested json:\"-\" differs:", errors.Is(err, idem.ErrPayloadMismatch))
	out, err := w.Route(ctx, "r1", Gateway{Name: "visa", onRetry: func() {}})
	fmt.Println("route:", out, err)
	out, err = w.Route(ctx, "r1", Gateway{Name: "visa"})
	fmt.Println("route again (another func, same gateway):", out, err)
	_, err = w.Route(ctx, "r1", Gateway{Name: "amex"})
	fmt.Println("route, another gateway:", errors.Is(err, idem.ErrPayloadMismatch))
	fmt.Println("runs:", b.runs)
}
