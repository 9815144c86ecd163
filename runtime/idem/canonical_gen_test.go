package idem_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

type genLeaf struct {
	S    string
	b    []byte
	n    int8
	Flag bool
}

type genValue struct {
	Leaf   genLeaf
	ptr    *genLeaf
	List   []string
	M      map[string]genLeaf
	Any    any
	hidden [2]uint16
}

// genRand draws from small alphabets, so that equal values are frequent
// and values that differ differ in one small place: an invalid UTF-8
// byte, nil against empty, an unexported field.
type genRand struct{ r *rand.Rand }

func (g genRand) pick(n int) int { return g.r.IntN(n) }

func (g genRand) str() string {
	return []string{"", "a", "ab", "\xff", "\xfe", "\uFFFD", "a\x00"}[g.pick(7)]
}

func (g genRand) bytes() []byte {
	switch g.pick(4) {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		return []byte{0xff}
	}
	return []byte("a")
}

func (g genRand) leaf() genLeaf {
	return genLeaf{S: g.str(), b: g.bytes(), n: int8(g.pick(2)), Flag: g.pick(2) == 0}
}

func (g genRand) value() genValue {
	v := genValue{Leaf: g.leaf(), hidden: [2]uint16{uint16(g.pick(2)), 0}}
	if g.pick(2) == 0 {
		l := g.leaf()
		v.ptr = &l
	}
	switch g.pick(3) {
	case 1:
		v.List = []string{}
	case 2:
		v.List = []string{g.str(), g.str()}
	}
	switch g.pick(3) {
	case 1:
		v.M = map[string]genLeaf{}
	case 2:
		v.M = map[string]genLeaf{g.str(): g.leaf(), g.str(): g.leaf()}
	}
	switch g.pick(4) {
	case 1:
		v.Any = g.leaf()
	case 2:
		v.Any = g.str()
	case 3:
		v.Any = []byte(g.str())
	}
	return v
}

// TestHasherValueIsExact is generative: over many pairs of random values
// (drawn so that equal pairs are common), two values have the same
// fingerprint exactly when reflect.DeepEqual says they are equal, so the
// fingerprint neither misses a difference the method could see nor tells
// apart two equal requests.
func TestHasherValueIsExact(t *testing.T) {
	g := genRand{rand.New(rand.NewPCG(1, 2))}
	sum := func(v genValue) idem.Fingerprint {
		var h idem.Hasher
		h.Value(v)
		fp, err := h.Sum()
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	equal := 0
	const pairs = 20000
	for range pairs {
		a, b := g.value(), g.value()
		if g.pick(3) == 0 {
			b = a // a copy: shares pointers and maps, still equal
		}
		same := reflect.DeepEqual(a, b)
		if same {
			equal++
		}
		if got := sum(a) == sum(b); got != same {
			t.Fatalf("DeepEqual=%v but equal fingerprints=%v:\n%#v\n%#v", same, got, a, b)
		}
	}
	if equal < pairs/10 || equal > pairs*9/10 {
		t.Fatalf("%d of %d pairs equal: the generator does not exercise both sides", equal, pairs)
	}
}

// BenchmarkHasherValue measures the canonical encoding of a composite
// parameter, next to encoding/json on the same value for comparison.
func BenchmarkHasherValue(b *testing.B) {
	v := genValue{
		Leaf: genLeaf{S: "order-1001", b: []byte("abc"), n: 1, Flag: true},
		List: []string{"a", "b", "c"},
		M:    map[string]genLeaf{"x": {S: "1"}, "y": {S: "2"}},
		Any:  "tag",
	}
	b.Run("canonical", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var h idem.Hasher
			h.Value(v)
			if _, err := h.Sum(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
