// ImportClash: the package imports a package of its own named idem, uses it
// in the annotated signature, and declares names (context, time) that the
// generated file would import: the generated file imports the runtime and
// those packages under other names.
package main

import (
	"fmt"

	stdctx "context"

	"github.com/idemgen/idemgen/testdata/ImportClash/idem"

	rt "github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// time shadows the standard package name at package level.
var time = "noon"

// context likewise.
type context struct{ user string }

type Desk struct{ opened []string }

//idem:key=t.ID ttl=2h
func (d *Desk) Open(ctx stdctx.Context, t *idem.Ticket) (*idem.Ticket, error) {
	d.opened = append(d.opened, t.ID)
	return &idem.Ticket{ID: t.ID, Title: t.Title + " (opened at " + time + ")"}, nil
}

func main() {
	ctx := stdctx.Background()
	d := &Desk{}
	w := NewIdempotentDesk(d, rt.NewExecutor(memstore.New(), rt.SingleTenant()))
	for range 2 {
		t, err := w.Open(ctx, &idem.Ticket{ID: "T-1", Title: "printer on fire"})
		fmt.Printf("%+v %v\n", *t, err)
	}
	fmt.Println("opened:", d.opened, context{user: "ann"}.user)
}
