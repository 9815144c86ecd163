package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestKeyPartsTimeIsTheInstant: a time.Time key part is its instant, so the
// same instant read in another location, with or without a monotonic
// reading, or decoded from JSON, is the same key; another instant is
// another key; the zero time is missing.
func TestKeyPartsTimeIsTheInstant(t *testing.T) {
	now := time.Now() // has a monotonic reading
	var decoded time.Time
	b, err := json.Marshal(now.In(time.FixedZone("X", 7200)))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &decoded))
	key := func(at time.Time) (idem.Key, error) {
		var p idem.KeyParts
		p.Time("at", at)
		return p.Key("t", "op")
	}
	want, err := key(now)
	require.NoError(t, err)
	for name, same := range map[string]time.Time{
		"no monotonic reading": now.Round(0),
		"UTC":                  now.UTC(),
		"another zone":         now.In(time.FixedZone("Y", -5*3600)),
		"decoded from JSON":    decoded,
		"local":                now.Local(),
	} {
		got, err := key(same)
		require.NoError(t, err, name)
		assert.Equal(t, want.ID, got.ID, "%s: the same instant is the same key", name)
	}
	for name, other := range map[string]time.Time{
		"one nanosecond later": now.Add(1),
		"one second earlier":   now.Add(-time.Second),
		"before 1970":          time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
	} {
		got, err := key(other)
		require.NoError(t, err, name)
		assert.NotEqual(t, want.ID, got.ID, "%s: another instant is another key", name)
	}
	assert.Contains(t, want.Text, now.UTC().Format(time.RFC3339Nano), "the readable form is RFC 3339 in UTC")

	// A time inside an interface part (a fmt.Stringer or TextMarshaler
	// parameter) is keyed by its instant too.
	for name, add := range map[string]func(*idem.KeyParts, time.Time){
		"Stringer":           func(p *idem.KeyParts, at time.Time) { p.Stringer("at", at) },
		"Text":               func(p *idem.KeyParts, at time.Time) { p.Text("at", at) },
		"Stringer (pointer)": func(p *idem.KeyParts, at time.Time) { p.Stringer("at", &at) },
	} {
		var p idem.KeyParts
		add(&p, decoded)
		got, err := p.Key("t", "op")
		require.NoError(t, err, name)
		assert.Equal(t, want.ID, got.ID, name)
	}
	var nilTime *time.Time
	var np idem.KeyParts
	np.Stringer("at", nilTime)
	_, err = np.Key("t", "op")
	assert.ErrorIs(t, err, idem.ErrMissingKey)
	_, err = key(time.Time{})
	assert.ErrorIs(t, err, idem.ErrMissingKey, "the zero time is a missing part")
}

type nilStringer struct{ s string }

func (n *nilStringer) String() string { return n.s }

type nilText struct{ s string }

func (n *nilText) MarshalText() ([]byte, error) { return []byte(n.s), nil }

// TestKeyPartsTypedNil: a nil pointer inside an interface key part is a
// missing part, not a panic.
func TestKeyPartsTypedNil(t *testing.T) {
	var p idem.KeyParts
	var s fmt.Stringer = (*nilStringer)(nil)
	require.NotPanics(t, func() { p.Stringer("req.Ref", s) })
	_, err := p.Key("t", "op")
	assert.ErrorIs(t, err, idem.ErrMissingKey)
	assert.ErrorContains(t, err, "req.Ref")

	var q idem.KeyParts
	require.NotPanics(t, func() { q.Text("req.Day", (*nilText)(nil)) })
	_, err = q.Key("t", "op")
	assert.ErrorIs(t, err, idem.ErrMissingKey)
	assert.ErrorContains(t, err, "req.Day")

	var r idem.KeyParts
	r.Stringer("ip", netip.MustParseAddr("10.0.0.1"))
	_, err = r.Key("t", "op")
	assert.NoError(t, err, "a non-pointer Stringer is read as usual")
}

type inner struct {
	Tag    string
	hidden int
}

type payload struct {
	ID      string
	secret  string
	Skip    string `json:"-"`
	Bytes   []byte
	Inner   inner
	Ptr     *inner
	Any     any
	Map     map[string]int
	Float   float64
	At      time.Time
	private []string
}

// TestHasherValueSeesEverything: two values that differ anywhere the method
// can see (an unexported field, a json:"-" field, an invalid UTF-8 byte,
// nil versus empty, -0 versus +0) have different fingerprints; the same
// value built another way (a map filled in another order, the same instant
// in a location of another name but the same offset) has the same.
func TestHasherValueSeesEverything(t *testing.T) {
	base := func() payload {
		return payload{
			ID: "a", secret: "s", Skip: "k", Bytes: []byte{1, 2}, Inner: inner{"t", 1},
			Ptr: &inner{"p", 2}, Any: inner{"i", 3}, Map: map[string]int{"x": 1, "y": 2},
			Float: 1.5, At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), private: []string{"q"},
		}
	}
	sum := func(v any) idem.Fingerprint {
		t.Helper()
		var h idem.Hasher
		h.Value(v)
		fp, err := h.Sum()
		require.NoError(t, err)
		return fp
	}
	want := sum(base())
	differ := map[string]func(*payload){
		"unexported field":          func(p *payload) { p.secret = "t" },
		"json:\"-\" field":          func(p *payload) { p.Skip = "l" },
		"unexported nested field":   func(p *payload) { p.Inner.hidden = 9 },
		"unexported through a ptr":  func(p *payload) { p.Ptr.hidden = 9 },
		"unexported in interface":   func(p *payload) { p.Any = inner{"i", 4} },
		"dynamic type of interface": func(p *payload) { p.Any = struct{ Tag string }{"i"} },
		"unexported slice":          func(p *payload) { p.private = []string{"r"} },
		"nil versus empty slice":    func(p *payload) { p.private = []string{} },
		"nil versus empty bytes":    func(p *payload) { p.Bytes = nil },
		"map value":                 func(p *payload) { p.Map["y"] = 3 },
		"nil pointer":               func(p *payload) { p.Ptr = nil },
		"negative zero":             func(p *payload) { p.Float = math.Copysign(0, -1) },
		"another instant":           func(p *payload) { p.At = p.At.Add(1) },
	}
	for name, change := range differ {
		p := base()
		change(&p)
		assert.NotEqual(t, want, sum(p), name)
	}
	zero := func(p *payload) { p.Float = 0 }
	a, b := base(), base()
	zero(&a)
	b.Float = math.Copysign(0, -1)
	assert.NotEqual(t, sum(a), sum(b), "-0 and +0 differ")

	// Invalid UTF-8 is not collapsed: two different invalid strings differ,
	// and so do an invalid byte and U+FFFD.
	for _, pair := range [][2]string{{"\xff", "\xfe"}, {"\xff", "\uFFFD"}, {"a\xffb", "a\xfeb"}} {
		p, q := base(), base()
		p.ID, q.ID = pair[0], pair[1]
		assert.NotEqual(t, sum(p), sum(q), "%q and %q", pair[0], pair[1])
		assert.NotEqual(t, sum(map[string]string{pair[0]: "v"}), sum(map[string]string{pair[1]: "v"}), "map keys %q and %q", pair[0], pair[1])
	}

	// The typed adders are exact too.
	typed := func(s string) idem.Fingerprint {
		var h idem.Hasher
		h.String(s)
		fp, err := h.Sum()
		require.NoError(t, err)
		return fp
	}
	assert.NotEqual(t, typed("\xff"), typed("\xfe"))
	assert.NotEqual(t, typed("\xff"), typed("\uFFFD"))

	same := base()
	same.Map = map[string]int{}
	same.Map["y"] = 2
	same.Map["x"] = 1
	same.Ptr = &inner{"p", 2}
	assert.Equal(t, want, sum(same), "the same value, built another way")
	local := base()
	local.At = time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("", 0))
	assert.Equal(t, want, sum(local), "a time is its instant")
	zoned := base()
	zoned.At = zoned.At.In(time.FixedZone("CET", 3600))
	assert.Equal(t, want, sum(zoned), "the same instant in another zone is the same request")
	mono := base()
	mono.At = time.Now()
	plain := mono
	plain.At = mono.At.Round(0)
	assert.Equal(t, sum(mono), sum(plain), "not its monotonic reading")
}

type node struct {
	Next *node
	N    int
}

// TestHasherValueRefuses: what a fingerprint cannot compare (a function, a
// channel) is an error, and a cycle is encoded, not followed forever.
func TestHasherValueRefuses(t *testing.T) {
	for want, v := range map[string]any{
		"idem: fingerprint: at F: a func() cannot be compared":        struct{ F func() }{F: func() {}},
		"idem: fingerprint: at [1]: a chan int cannot be compared":    []any{1, make(chan int)},
		`idem: fingerprint: at ["f"].X: a func() cannot be compared`:  map[string]any{"f": struct{ X func() }{func() {}}},
		"idem: fingerprint: at a.f: a func() cannot be compared":      struct{ a struct{ f func() } }{struct{ f func() }{func() {}}},
		"idem: fingerprint: at [0][2]: a chan int cannot be compared": [][]any{{0, 1, make(chan int)}},
	} {
		var h idem.Hasher
		h.Value(v)
		_, err := h.Sum()
		assert.ErrorContains(t, err, want)
	}
	var h idem.Hasher
	h.Value(struct{ F func() }{})
	_, err := h.Sum()
	assert.NoError(t, err, "a nil function is comparable")

	a := &node{N: 1}
	a.Next = a
	b := &node{N: 1}
	b.Next = &node{N: 1, Next: b}
	var ha, hb idem.Hasher
	ha.Value(a)
	hb.Value(b)
	fa, err := ha.Sum()
	require.NoError(t, err)
	fb, err := hb.Sum()
	require.NoError(t, err)
	assert.NotEqual(t, fa, fb, "a cycle of one and a cycle of two differ")
}

// TestJSONCodecRefusesInvalidUTF8: the JSON codec cannot carry a string
// that is not UTF-8 (encoding/json would replace its bytes with U+FFFD and
// the replay would differ), so it refuses to encode one, naming where it is.
func TestJSONCodecRefusesInvalidUTF8(t *testing.T) {
	type res struct {
		Name  string
		Items []string
		Raw   []byte
	}
	var c idem.JSONCodec
	_, err := c.Marshal(res{Name: "ok", Items: []string{"a", "b\xff"}})
	require.Error(t, err)
	assert.ErrorContains(t, err, "Items[1]")
	assert.ErrorContains(t, err, "UTF-8")

	_, err = c.Marshal(map[string]int{"\xfe": 1})
	assert.ErrorContains(t, err, "UTF-8")

	for _, ok := range []any{res{Name: "\uFFFD literal", Raw: []byte{0xff}}, `back\ufffd`, "\\ufffd"} {
		b, err := c.Marshal(ok)
		require.NoError(t, err, "%#v", ok)
		assert.NotEmpty(t, b)
	}
}

var (
	errCardDeclined = errors.New("card declined")
	errOther        = errors.New("other")
)

// TestReplayedFinalKeepsSentinel: a Final error that wraps a sentinel the
// Method lists (in Final or Sentinels) replays errors.Is-equal to it.
func TestReplayedFinalKeepsSentinel(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "T.Pay", TTL: time.Minute, Sentinels: []idem.FinalError{
		{Name: "errOther", Err: errOther}, {Name: "errCardDeclined", Err: errCardDeclined},
	}}
	runs := 0
	pay := func(context.Context) (int, error) {
		runs++
		return 0, idem.Final(fmt.Errorf("pay: %w", errCardDeclined))
	}
	_, first := call(t.Context(), ex, m, "a", pay)
	_, again := call(t.Context(), ex, m, "a", pay)
	assert.Equal(t, 1, runs, "a final error is stored")
	for _, err := range []error{first, again} {
		assert.ErrorIs(t, err, errCardDeclined)
		assert.ErrorIs(t, err, idem.ErrFinal)
		assert.NotErrorIs(t, err, errOther)
		assert.EqualError(t, err, "pay: card declined")
	}
	var re *idem.ReplayedError
	require.ErrorAs(t, again, &re)
	assert.Equal(t, "errCardDeclined", re.Code)

	// A sentinel listed in Sentinels is not final by itself.
	_, err := call(t.Context(), ex, m, "b", func(context.Context) (int, error) { runs++; return 0, errCardDeclined })
	assert.ErrorIs(t, err, errCardDeclined)
	_, err = call(t.Context(), ex, m, "b", func(context.Context) (int, error) { runs++; return 1, nil })
	assert.NoError(t, err)
	assert.Equal(t, 3, runs, "a bare sentinel releases the key")
}

// client holds what a fingerprint cannot compare, and says itself what of
// it matters.
type client struct {
	Name    string
	onRetry func()
}

func (c *client) IdemFingerprint() ([]byte, error) {
	if c.Name == "" {
		return nil, errors.New("unnamed client")
	}
	return []byte(c.Name), nil
}

// TestHasherValueFingerprinter: a type with an IdemFingerprint method is
// hashed by what it returns, wherever it is (a parameter, a field, behind
// a pointer receiver on an addressable value); its error is Sum's.
func TestHasherValueFingerprinter(t *testing.T) {
	sum := func(v any) (idem.Fingerprint, error) {
		var h idem.Hasher
		h.Value(v)
		return h.Sum()
	}
	type req struct {
		ID string
		C  client
		P  *client
		I  idem.Fingerprinter
	}
	a, err := sum(req{ID: "1", C: client{"x", func() {}}, P: &client{"y", func() {}}, I: &client{"z", nil}})
	require.NoError(t, err)
	b, err := sum(req{ID: "1", C: client{"x", nil}, P: &client{"y", nil}, I: &client{"z", func() {}}})
	require.NoError(t, err)
	assert.Equal(t, a, b, "only what IdemFingerprint returns counts")
	c, err := sum(req{ID: "1", C: client{"x", nil}, P: &client{"Y", nil}, I: &client{"z", nil}})
	require.NoError(t, err)
	assert.NotEqual(t, a, c)
	d, err := sum(req{ID: "1", C: client{"x", nil}, I: &client{"z", nil}})
	require.NoError(t, err, "a nil pointer is not called")
	assert.NotEqual(t, a, d)
	_, err = sum(&client{})
	assert.ErrorContains(t, err, "unnamed client")
	_, err = sum(req{ID: "1", C: client{"x", nil}, P: &client{"y", nil}})
	require.NoError(t, err, "a nil interface field")
}
