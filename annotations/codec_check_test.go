package annotations

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResolveLossyResults: every way a result type loses state through the
// JSON codec is refused at the method, naming the path to the field and the
// ways out; what round-trips, or what a custom codec carries, is accepted.
func TestResolveLossyResults(t *testing.T) {
	const wayOut = "; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom"
	tests := []struct {
		name, body, want string
	}{
		{"unexported field", `type T struct{ ID string; n int }
//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (T, error) { return T{}, nil }`,
			`13:10: method S.M: result type T cannot round-trip through the JSON codec: field T.n is unexported: JSON drops it, so a replay would return it zeroed; export it, or give T MarshalJSON and UnmarshalJSON methods that carry it` + wayOut},
		{"json dash", "type T struct{ ID string; Secret string `json:\"-\"` }\n" + `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (*T, error) { return nil, nil }`,
			`13:10: method S.M: result type *T cannot round-trip through the JSON codec: field T.Secret is tagged json:"-": JSON drops it, so a replay would return it zeroed; remove the tag, or give T MarshalJSON and UnmarshalJSON methods that carry it` + wayOut},
		{"deep in a slice of a map", `type L struct{ SKU string; cost int }
type O struct{ Lines []L }
//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (map[string]*O, error) { return nil, nil }`,
			`14:10: method S.M: result type map[string]*O cannot round-trip through the JSON codec: field O.Lines: field L.cost is unexported: JSON drops it, so a replay would return it zeroed; export it, or give L MarshalJSON and UnmarshalJSON methods that carry it` + wayOut},
		{"embedded unexported non-struct", `type count int
type T struct{ count; ID string }
//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (T, error) { return T{}, nil }`,
			`14:10: method S.M: result type T cannot round-trip through the JSON codec: field T.count is an unexported embedded field: JSON drops it, so a replay would return it zeroed; export it, or give T MarshalJSON and UnmarshalJSON methods that carry it` + wayOut},
		{"embedded pointer to unexported struct", `type base struct{ X int }
type T struct{ *base }
//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (T, error) { return T{}, nil }`,
			`14:10: method S.M: result type T cannot round-trip through the JSON codec: field T.base embeds a pointer to an unexported struct: JSON cannot allocate it on decode, so a replay would fail; export it, or give T MarshalJSON and UnmarshalJSON methods that carry it` + wayOut},
		{"anonymous struct", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (struct{ A int; b int }, error) { return struct{ A int; b int }{}, nil }`,
			`12:10: method S.M: result type struct{A int; b int} cannot round-trip through the JSON codec: field b is unexported: JSON drops it, so a replay would return it zeroed; export it, or use a named type with MarshalJSON and UnmarshalJSON methods that carry it` + wayOut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, p, err := load(t, map[string]string{"s.go": header + tt.body + "\n"})
			got := stripFile(errLines(err), "s.go")
			if !assert.Equal(t, []string{tt.want}, got) {
				t.Logf("got:\n%s", strings.Join(got, "\n"))
			}
			assert.Nil(t, p)
		})
	}

	_, p, err := load(t, map[string]string{"s.go": strings.Replace(header, "import (\n", "import (\n\t\"encoding/json\"\n", 1) + `
type sealed struct{ n int }
type T struct {
	Sealed Sealed
	_      int
	inner
	Dash int ` + "`json:\"-,\"`" + `
}
type inner struct{ Y int }
type Sealed struct{ n int }
func (s Sealed) MarshalJSON() ([]byte, error) { return json.Marshal(s.n) }
func (s *Sealed) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &s.n) }

//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (T, error) { return T{}, nil }

//idem:key=id ttl=1s codec=custom
func (S) N(ctx context.Context, id string) (sealed, error) { return sealed{}, nil }

// Hidden is stored by a codec of the user's, for every method.
//idem:defaults codec=custom
type Hidden struct{}

//idem:key=id ttl=1s
func (Hidden) M(ctx context.Context, id string) (sealed, error) { return sealed{}, nil }
`})
	require.NoError(t, err)
	require.Len(t, p.Types, 2)
}

// TestResolveFingerprintBlindSpots: a hashed parameter holding, anywhere in
// its type (unexported fields included), a value a fingerprint cannot
// compare is refused at the parameter, naming the path and the way out.
func TestResolveFingerprintBlindSpots(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"unexported func field", `type Req struct{ ID string; hooks *struct{ done func() } }
//idem:key=req.ID ttl=1s
func (S) M(ctx context.Context, req Req) error { return nil }`,
			`13:33: method S.M: parameter req cannot be fingerprinted: req.hooks.done is a function (func()), which a fingerprint cannot compare; give Req an IdemFingerprint method (idem.Fingerprinter) that says what of it counts, or leave req out of the fingerprint with hash=none (a retry with the same key then replays whatever its arguments)`},
		{"chan in a map, with another parameter", `type Req struct{ ID string; Subs map[string][]chan int }
//idem:key=req.ID ttl=1s
func (S) M(ctx context.Context, req Req, n int) error { return nil }`,
			`13:33: method S.M: parameter req cannot be fingerprinted: req.Subs[k][i] is a channel (chan int), which a fingerprint cannot compare; give Req an IdemFingerprint method (idem.Fingerprinter) that says what of it counts, or leave req out of the fingerprint with hash=n`},
		{"unsafe pointer, named in hash=", `type Req struct{ ID string; p unsafe.Pointer }
//idem:key=req.ID ttl=1s hash=req
func (S) M(ctx context.Context, req Req) error { return nil }`,
			`13:31: method S.M: parameter req cannot be fingerprinted: req.p is an unsafe.Pointer, which a fingerprint cannot compare; give Req an IdemFingerprint method (idem.Fingerprinter) that says what of it counts, or leave req out of the fingerprint with hash=none (a retry with the same key then replays whatever its arguments)`},
		{"every blind spot of a parameter, not the first", `type Req struct{ ID string; done func(); Subs map[string]chan int; in struct{ f func() } }
//idem:key=req.ID ttl=1s
func (S) M(ctx context.Context, req Req) error { return nil }`,
			`13:33: method S.M: parameter req cannot be fingerprinted: req.done is a function (func()), req.Subs[k] is a channel (chan int) and req.in.f is a function (func()), which a fingerprint cannot compare; give Req an IdemFingerprint method (idem.Fingerprinter) that says what of it counts, or leave req out of the fingerprint with hash=none (a retry with the same key then replays whatever its arguments)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := header + tt.body + "\n"
			if strings.Contains(tt.body, "unsafe.") {
				src = strings.Replace(src, "import (\n", "import (\n\t\"unsafe\"\n", 1)
			}
			_, p, err := load(t, map[string]string{"s.go": src})
			got := stripFile(errLines(err), "s.go")
			if !assert.Equal(t, []string{tt.want}, got) {
				t.Logf("got:\n%s", strings.Join(got, "\n"))
			}
			assert.Nil(t, p)
		})
	}

	_, _, err := load(t, map[string]string{"s.go": header + `
type List struct{ Next *List; V any; hidden [2]complex64 }
type Req struct{ ID string; l List; Any interface{ M() } }

//idem:key=req.ID ttl=1s
func (S) M(ctx context.Context, req Req, done chan int) error { return nil }
`})
	require.Error(t, err, "done is hashed by default")
	_, p, err := load(t, map[string]string{"s.go": header + `
type List struct{ Next *List; V any; hidden [2]complex64 }
type Req struct{ ID string; l List; Any interface{ M() } }

//idem:key=req.ID ttl=1s hash=req
func (S) M(ctx context.Context, req Req, done chan int) error { return nil }

// Hooked holds a function but says itself what counts.
type Hooked struct{ ID string; onDone func() }
func (h *Hooked) IdemFingerprint() ([]byte, error) { return []byte(h.ID), nil }
type Outer struct{ H Hooked; M map[string]*Hooked }

//idem:key=h.ID ttl=1s
func (S) N(ctx context.Context, req Outer, h Hooked) error { return nil }
`})
	require.NoError(t, err, "recursive types, interfaces (checked at run time), complex numbers and idem.Fingerprinter types are fine; hash= leaves done out")
	require.Len(t, p.Types, 1)
	require.Len(t, p.Types[0].Methods, 2)
}

// TestResultShapes is the class of issue 20.5: for every shape of result
// type, the generator either accepts it (it round-trips through the JSON
// codec, or the method says codec=custom) or refuses it with the true
// reason for every field that blocks it, not only the first.
func TestResultShapes(t *testing.T) {
	const (
		prefix    = "15:10: method S.M: result type "
		wayOut    = "; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom"
		anyReason = "any is an interface: JSON decodes into it only its own types (float64 for every number, map[string]any for every object, []any for every array), so a replay would differ from the first result (an int comes back as float64, a struct as map[string]any, an int64 over 2^53 rounded); use a concrete type"
	)
	tests := []struct {
		name, decl, result string
		codec              string // the method's codec= option, if any
		want               string // "" when accepted
	}{
		{"the issue's Meta and chan", `type T struct{ ID string; Meta map[string]any; Done chan struct{} }`, "T", "",
			prefix + "T cannot round-trip through the JSON codec: 2 problems: (1) field T.Meta: " + anyReason + "; (2) field T.Done: chan struct{} is a channel: JSON cannot encode it" + wayOut},
		{"any alone", `type T struct{ V any }`, "T", "",
			prefix + "T cannot round-trip through the JSON codec: field T.V: " + anyReason + wayOut},
		{"interface{} in a slice", `type T struct{ Items []interface{} }`, "*T", "",
			prefix + "*T cannot round-trip through the JSON codec: field T.Items: interface{} is an interface: JSON decodes into it only its own types (float64 for every number, map[string]any for every object, []any for every array), so a replay would differ from the first result (an int comes back as float64, a struct as map[string]any, an int64 over 2^53 rounded); use a concrete type" + wayOut},
		{"an interface with methods", `type T struct{ Err error }`, "T", "",
			prefix + "T cannot round-trip through the JSON codec: field T.Err: error is an interface with methods: JSON cannot decode a value into it, so a replay would fail; use a concrete type" + wayOut},
		{"every field, nested and at the top", `type In struct{ F func(); c complex64 }
type T struct{ In In; Secret string ` + "`json:\"-\"`" + `; m map[K]chan int }`, "[]T", "",
			prefix + "[]T cannot round-trip through the JSON codec: 4 problems: " +
				"(1) field T.In: field In.F: func() is a function: JSON cannot encode it; " +
				"(2) field T.In: field In.c is unexported: JSON drops it, so a replay would return it zeroed; export it, or give In MarshalJSON and UnmarshalJSON methods that carry it; " +
				`(3) field T.Secret is tagged json:"-": JSON drops it, so a replay would return it zeroed; remove the tag, or give T MarshalJSON and UnmarshalJSON methods that carry it; ` +
				"(4) field T.m is unexported: JSON drops it, so a replay would return it zeroed; export it, or give T MarshalJSON and UnmarshalJSON methods that carry it" + wayOut},
		{"a map's key and value", `type T map[K]chan int`, "T", "",
			prefix + "T cannot round-trip through the JSON codec: 2 problems: (1) map key type K is not a string or integer kind or an encoding.TextMarshaler; (2) chan int is a channel: JSON cannot encode it" + wayOut},
		{"any under codec=custom", `type T struct{ Meta map[string]any }`, "T", "codec=custom", ""},
		{"any behind the type's own marshalers", `type T struct{ meta map[string]any }
func (t T) MarshalJSON() ([]byte, error) { return json.Marshal(t.meta) }
func (t *T) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &t.meta) }`, "T", "", ""},
		{"a type with marshalers of its own, in a map", `type T struct{ Raw map[string]json.RawMessage }`, "T", "", ""},
		{"concrete maps, slices and pointers", `type T struct{ Meta map[string]string; Counts map[int64]uint; Next *T; Tags []string }`, "T", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := strings.Replace(header, "import (\n", "import (\n\t\"encoding/json\"\n", 1) +
				"var _ = json.Marshal\ntype K struct{ A int }\n" +
				"//idem:key=id ttl=1s " + tt.codec + "\n" +
				"func (S) M(ctx context.Context, id string) (" + tt.result + ", error) { panic(0) }\n" + tt.decl + "\n"
			_, p, err := load(t, map[string]string{"s.go": body})
			got := stripFile(errLines(err), "s.go")
			if tt.want == "" {
				assert.Empty(t, got)
				assert.NotNil(t, p)
				return
			}
			if !assert.Equal(t, []string{tt.want}, got) {
				t.Logf("got:\n%s", strings.Join(got, "\n"))
			}
			assert.Nil(t, p)
		})
	}
}
