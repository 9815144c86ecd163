package idem_test

import (
	"context"
	"errors"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// layoutHash is the hash CheckLayout compares, of a layout written as the
// generator writes it (annotations, scheme.go).
func layoutHash(layout string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(layout))
	return h.Sum32()
}

type staleItem struct {
	SKU string
	B   byte
	R   rune
}

type staleReq struct {
	ID    string
	Items []staleItem
	Meta  map[string]*staleReq
	At    time.Time
	Any   any
}

// TestCheckLayout: CheckLayout accepts the layout the generator wrote for
// the same types (byte and rune as uint8 and int32, time.Time apart, a
// recursive type by its level) and refuses any other with ErrStaleWrapper
// and a message that says to run go generate.
func TestCheckLayout(t *testing.T) {
	want := layoutHash("idemgen layout 1; *struct{string; []struct{string; uint8; int32}; map[string]*@1; time; interface}; fields struct{string; uint8; int32}")
	params := []idem.Hashed{idem.HashedParam[*staleReq](false), idem.HashedParam[staleItem](true)}
	if err := idem.CheckLayout("Svc.Do", want, params...); err != nil {
		t.Fatalf("the generator's layout is refused: %v", err)
	}
	for name, ps := range map[string][]idem.Hashed{
		"fields flag":   {idem.HashedParam[*staleReq](false), idem.HashedParam[staleItem](false)},
		"another type":  {idem.HashedParam[*staleReq](false), idem.HashedParam[struct{ SKU string }](true)},
		"one parameter": {idem.HashedParam[*staleReq](false)},
	} {
		err := idem.CheckLayout("Svc.Do", want, ps...)
		if !errors.Is(err, idem.ErrStaleWrapper) || !strings.Contains(err.Error(), "run go generate") || !strings.Contains(err.Error(), `"Svc.Do"`) {
			t.Errorf("%s: %v, want ErrStaleWrapper naming the operation and go generate", name, err)
		}
	}
}

// TestDoRefusesStaleWrapper: a Method whose Stale is set is refused before
// anything is claimed, and the method does not run.
func TestDoRefusesStaleWrapper(t *testing.T) {
	st := memstore.New()
	ex := idem.NewExecutor(st, idem.SingleTenant())
	stale := idem.CheckLayout("Svc.Do", 1, idem.HashedParam[string](false))
	m := &idem.Method{Op: "Svc.Do", TTL: time.Hour, Stale: stale}
	var k idem.KeyParts
	k.String("id", "a")
	var h idem.Hasher
	h.String("a")
	ran := false
	_, err := idem.Do(context.Background(), ex, m, &k, &h, func(context.Context) (int, error) { ran = true; return 1, nil })
	if !errors.Is(err, idem.ErrStaleWrapper) || ran {
		t.Fatalf("err %v, ran %v: want ErrStaleWrapper without running", err, ran)
	}
	m.Stale = nil
	if _, err := idem.Do(context.Background(), ex, m, &k, &h, func(context.Context) (int, error) { ran = true; return 1, nil }); err != nil || !ran {
		t.Fatalf("err %v, ran %v: nothing was claimed by the refused call, so this one runs", err, ran)
	}
}
