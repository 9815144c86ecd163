// ByteKeys: key parts that are arrays of bytes, of a named byte type, and
// such arrays returned by methods, each converted to []byte.
package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// B is a named byte.
type B byte

// ID is an array of named bytes.
type ID [4]B

// Msg holds byte-like values.
type Msg struct {
	ID   ID
	UUID [16]byte
	Raw  [2]B
}

// Key returns an ID, not addressable.
func (m Msg) Key() ID { return m.ID }

// Svc counts its calls.
type Svc struct{ calls int }

// Do keys on every byte-like form.
//
//idem:key=id+msg.ID+msg.UUID+msg.Raw+msg.Key()+arr ttl=1m
func (s *Svc) Do(ctx context.Context, id ID, msg *Msg, arr [3]B) (int, error) {
	s.calls++
	return s.calls, nil
}

func main() {
	ctx := context.Background()
	s := &Svc{}
	w := NewIdempotentSvc(s, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	m := &Msg{ID: ID{1, 2, 3, 4}, UUID: [16]byte{9}, Raw: [2]B{5, 6}}
	fmt.Println(w.Do(ctx, ID{1}, m, [3]B{7}))
	fmt.Println(w.Do(ctx, ID{1}, m, [3]B{7}))
	fmt.Println(w.Do(ctx, ID{2}, m, [3]B{7}))
	fmt.Println("calls:", s.calls)
}
