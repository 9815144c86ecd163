package idem_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
)

type dynA struct{ N int }

type dynB struct{ N int }

type dynInt int

func (dynA) Show() string   { return "a" }
func (dynB) Show() string   { return "b" }
func (dynInt) Show() string { return "i" }

type shower interface{ Show() string }

// TestInterfaceEveryPosition: two values that differ only in their dynamic
// type (A{1} and B{1}, int(1) and int64(1), a nil interface and a nil
// pointer in one) give different fingerprints at every position an
// interface can take: the parameter itself (Hasher.Interface, which the
// generator emits for a parameter of an interface type), a struct field, a
// slice or array element, a map key and value, behind a pointer, a named
// interface, an interface in an interface's dynamic value, a generic
// instance; and equal values give equal ones. The generated code's side of
// the same rule is internal/generate's TestFingerprintGenerative.
func TestInterfaceEveryPosition(t *testing.T) {
	type box[T any] struct{ V T }
	type inner struct{ V any }
	pairs := [][2]any{
		{dynA{1}, dynB{1}},
		{1, int64(1)},
		{dynInt(1), 1},
		{"a", shower(nil)},
		{nil, (*dynA)(nil)},
		{[]dynA{}, []dynB{}},
		{inner{dynA{1}}, inner{dynB{1}}},
		{box[int]{1}, box[int64]{1}},
	}
	positions := map[string]func(h *idem.Hasher, v any){
		"parameter":       func(h *idem.Hasher, v any) { h.Interface(v) },
		"field":           func(h *idem.Hasher, v any) { h.Value(struct{ V any }{v}) },
		"element":         func(h *idem.Hasher, v any) { h.Value([]any{v}) },
		"array element":   func(h *idem.Hasher, v any) { h.Value([1]any{v}) },
		"map value":       func(h *idem.Hasher, v any) { h.Value(map[string]any{"k": v}) },
		"behind pointer":  func(h *idem.Hasher, v any) { h.Value(&v) },
		"nested":          func(h *idem.Hasher, v any) { h.Interface(inner{v}) },
		"generic":         func(h *idem.Hasher, v any) { h.Value(box[any]{v}) },
		"named interface": func(h *idem.Hasher, v any) { s, _ := v.(shower); h.Value(struct{ S shower }{s}) },
	}
	sum := func(add func(*idem.Hasher, any), v any) idem.Fingerprint {
		var h idem.Hasher
		add(&h, v)
		fp, err := h.Sum()
		require.NoError(t, err)
		return fp
	}
	for name, add := range positions {
		for _, p := range pairs {
			_, a := p[0].(shower)
			_, b := p[1].(shower)
			if name == "named interface" && (!a || !b) {
				continue
			}
			assert.NotEqual(t, sum(add, p[0]), sum(add, p[1]), "%s: %#v and %#v", name, p[0], p[1])
			assert.Equal(t, sum(add, p[0]), sum(add, p[0]), "%s: %#v", name, p[0])
		}
	}
	// Map keys: one entry each.
	for _, p := range pairs {
		if p[0] == nil || p[1] == nil || !reflect.TypeOf(p[0]).Comparable() || !reflect.TypeOf(p[1]).Comparable() {
			continue
		}
		var ha, hb idem.Hasher
		ha.Value(map[any]int{p[0]: 1})
		hb.Value(map[any]int{p[1]: 1})
		fa, _ := ha.Sum()
		fb, _ := hb.Sum()
		assert.NotEqual(t, fa, fb, "map key: %#v and %#v", p[0], p[1])
	}
}
