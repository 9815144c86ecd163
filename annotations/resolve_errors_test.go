package annotations

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// header is the start of every error-case file: 10 lines, so a case's
// first line is line 11.
const header = `package svc

import (
	"context"
	"example.com/pay"
)

var _, _ = pay.ErrClosed, context.Context(nil)
type S struct{}
type R struct{ ID string }
`

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string
	}{
		// line 11 is the first line of body
		{"missing key", `//idem:ttl=1s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:1: missing key: write key=<parameter path> (e.g. key=req.ID), on the method or in the type's //idem:defaults`,
		}},
		{"missing ttl", `//idem:key=id
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:1: missing ttl: give ttl=<duration>, or the retry budget (retries and timeout; backoff, downstream, margin) to derive it`,
		}},
		{"no such param", `//idem:key=idd ttl=1s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:12: key: idd is not a parameter of S.M; did you mean "id"?`,
		}},
		{"no such field", `//idem:key=r.Id ttl=1s
func (S) M(ctx context.Context, r R) error { return nil }
`, []string{
			`11:14: key: R has no field or method Id; did you mean ID?`,
		}},
		{"ctx in key", `//idem:key=ctx ttl=1s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:12: key: ctx is the context; it cannot be a key part`,
		}},
		{"no param part", `//idem:key="x"+op+tenant ttl=1s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:12: key "x"+op+tenant has no parameter part: every call would share one record; add a parameter path (e.g. req.ID)`,
		}},
		{"float key", `//idem:key=f ttl=1s
func (S) M(ctx context.Context, f float64) error { return nil }
`, []string{
			`11:12: key: f has type float64, which is not key-able: floating-point values make unstable keys; use an integer, a string or a Stringer`,
		}},
		{"struct key", `//idem:key=r ttl=1s
func (S) M(ctx context.Context, r R) error { return nil }
`, []string{
			`11:12: key: r has type R, which is not key-able: a key part must be a string or integer kind, bool, a byte array, fmt.Stringer or encoding.TextMarshaler`,
		}},
		{"slice key", `//idem:key=b ttl=1s
func (S) M(ctx context.Context, b []byte) error { return nil }
`, []string{
			`11:12: key: b has type []byte, which is not key-able: a key part must be a string or integer kind, bool, a byte array, fmt.Stringer or encoding.TextMarshaler`,
		}},
		{"pointer receiver String", `//idem:key=r.P() ttl=1s
func (S) M(ctx context.Context, r R) error { return nil }
func (R) P() P { return P{} }
type P struct{ X int }
func (*P) String() string { return "" }
`, []string{
			`11:12: key: r.P() has type P, which is not key-able: its String method has a pointer receiver and the value, a method's result, is not addressable; give String a value receiver`,
		}},
		{"field called", `//idem:key=r.ID() ttl=1s
func (S) M(ctx context.Context, r R) error { return nil }
`, []string{
			`11:14: key: ID is a field, not a method: drop the ()`,
		}},
		{"method not called", `//idem:key=r.Key ttl=1s
func (S) M(ctx context.Context, r R) error { return nil }
func (R) Key() string { return "" }
`, []string{
			`11:14: key: Key is a method: call it, Key()`,
		}},
		{"param called", `//idem:key=id() ttl=1s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:12: a call in a key must be a method of a parameter path, like req.Key()`,
		}},
		{"method with error", `//idem:key=r.Key() ttl=1s
func (S) M(ctx context.Context, r R) error { return nil }
func (R) Key() (string, error) { return "", nil }
`, []string{
			`11:14: key: method Key must take no arguments and return one value that is not an error`,
		}},
		{"method with args in type", `//idem:key=r.Key() ttl=1s
func (S) M(ctx context.Context, r R) error { return nil }
func (R) Key(int) string { return "" }
`, []string{
			`11:14: key: method Key must take no arguments and return one value that is not an error`,
		}},
		{"pointer method not addressable", `//idem:key=r.Get().Key() ttl=1s
func (S) M(ctx context.Context, r R) error { return nil }
func (R) Get() Q { return Q{} }
type Q struct{}
func (*Q) Key() string { return "" }
`, []string{
			`11:20: key: method Key has a pointer receiver, and the Q value it would be called on is not addressable`,
		}},
		{"budget shorter", `//idem:key=id ttl=50s retries=2 timeout=2s backoff=500ms downstream=120s margin=30s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:15: ttl=50s is shorter than the retry budget 155s = 2×(2s+500ms)+120s+30s`,
		}},
		{"budget shorter no backoff", `//idem:key=id ttl=5s retries=3 timeout=2s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:15: ttl=5s is shorter than the retry budget 6s = 3×2s`,
		}},
		{"budget partial", `//idem:key=id ttl=5s timeout=2s margin=1s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:22: a retry budget needs both retries and timeout (backoff, downstream and margin default to 0)`,
		}},
		{"budget zero", `//idem:key=id retries=0 timeout=2s
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:15: the retry budget 0×2s is 0: give ttl=<duration>`,
		}},
		{"budget overflow", `//idem:key=id retries=1000000 timeout=100000d
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:15: the retry budget 1000000×100000d overflows`,
		}},
		{"lease longer", `//idem:key=id ttl=10s lease=1m
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:23: lease=1m is longer than ttl=10s`,
		}},
		{"lease longer derived", `//idem:key=id retries=2 timeout=2s lease=1m
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:36: lease=1m is longer than the ttl 4s derived from the retry budget`,
		}},
		{"final not declared", `//idem:key=id ttl=1s final=ErrNope
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:28: final: ErrNope is not declared in package svc; final lists sentinel error variables`,
		}},
		{"final const", `//idem:key=id ttl=1s final=ErrC|ErrF|ErrT|ErrS
func (S) M(ctx context.Context, id string) error { return nil }
const ErrC = 1
func ErrF() error { return nil }
type ErrT struct{}
var ErrS = "not an error"
`, []string{
			`11:28: final: ErrC is a constant, not a variable; final lists sentinel error variables`,
			`11:33: final: ErrF is a function, not a variable; final lists sentinel error variables`,
			`11:38: final: ErrT is a type, not a variable; final lists sentinel error variables`,
			`11:43: final: ErrS has type string, which is not an error`,
		}},
		{"final qualified", `//idem:key=id ttl=1s final=pay.ErrClosed|pay.NotVar|pay.ErrNotErr|pay.errHidden|pay.ErrMissing|other.ErrX
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:42: final: pay.NotVar is a constant, not a variable; final lists sentinel error variables`,
			`11:53: final: pay.ErrNotErr has type example.com/pay.NotErr, which is not an error`,
			`11:67: final: pay.errHidden is not exported`,
			`11:81: final: pay.ErrMissing is not declared in package example.com/pay; final lists sentinel error variables`,
			`11:96: final: package other is not imported by s.go; import it there`,
		}},
		{"hash missing", `//idem:key=id ttl=1s hash=id,idd,ctx
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:30: hash: idd is not a parameter of S.M; did you mean "id"?`,
			`11:34: hash: ctx is the context, which is never hashed`,
		}},
		{"hash unfingerprintable", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string, ch chan int, f func()) error { return nil }
`, []string{
			`12:44: method S.M: parameter ch cannot be fingerprinted: ch is a channel (chan int), which a fingerprint cannot compare; leave ch out of the fingerprint with hash=id`,
			`12:57: method S.M: parameter f cannot be fingerprinted: f is a function (func()), which a fingerprint cannot compare; leave f out of the fingerprint with hash=id`,
		}},
		{"no context", `//idem:key=id ttl=1s
func (S) M(id string) error { return nil }
`, []string{
			`12:10: method S.M: the first parameter must be a context.Context`,
		}},
		{"no error", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) string { return "" }
`, []string{
			`12:10: method S.M must return (T, error) or error`,
		}},
		{"three results", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (int, int, error) { return 0, 0, nil }
`, []string{
			`12:10: method S.M must return (T, error) or error`,
		}},
		{"variadic", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string, more ...int) error { return nil }
`, []string{
			`12:10: method S.M is variadic: idemgen does not wrap variadic methods (take a slice instead)`,
		}},
		{"result chan", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (*Out, error) { return nil, nil }
type Out struct{ ID string; Ch chan int }
`, []string{
			`12:10: method S.M: result type *Out cannot round-trip through the JSON codec: field Out.Ch: chan int is a channel: JSON cannot encode it; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom`,
		}},
		{"result any", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (any, error) { return nil, nil }
`, []string{
			`12:10: method S.M: result type any cannot round-trip through the JSON codec: any is an interface: JSON decodes into it only its own types (float64 for every number, map[string]any for every object, []any for every array), so a replay would differ from the first result (an int comes back as float64, a struct as map[string]any, an int64 over 2^53 rounded); use a concrete type; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom`,
		}},
		{"result no exported", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (Out, error) { return Out{}, nil }
type Out struct{ id string; n int }
`, []string{
			`12:10: method S.M: result type Out cannot round-trip through the JSON codec: 2 problems: (1) field Out.id is unexported: JSON drops it, so a replay would return it zeroed; export it, or give Out MarshalJSON and UnmarshalJSON methods that carry it; (2) field Out.n is unexported: JSON drops it, so a replay would return it zeroed; export it, or give Out MarshalJSON and UnmarshalJSON methods that carry it; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom`,
		}},
		{"result map key", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) (map[K]int, error) { return nil, nil }
type K struct{ A int }
`, []string{
			`12:10: method S.M: result type map[K]int cannot round-trip through the JSON codec: map key type K is not a string or integer kind or an encoding.TextMarshaler; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom`,
		}},
		{"result complex func", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) ([]complex128, error) { return nil, nil }
//idem:key=id ttl=1s
func (S) N(ctx context.Context, id string) (func(), error) { return nil, nil }
`, []string{
			`12:10: method S.M: result type []complex128 cannot round-trip through the JSON codec: complex128 is a complex number: JSON cannot encode it; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom`,
			`14:10: method S.N: result type func() cannot round-trip through the JSON codec: func() is a function: JSON cannot encode it; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom`,
		}},
		{"same op", `//idem:key=id ttl=1s op=pay
func (S) M(ctx context.Context, id string) error { return nil }

//idem:key=id ttl=1s
func (S) N(ctx context.Context, id string) error { return nil }

//idem:key=id ttl=1s op=pay
func (S) O(ctx context.Context, id string) error { return nil }
`, []string{
			`17:25: op "pay" is already used by S.M at 12:10: give one of them another op=`,
		}},
		{"default op clash", `//idem:key=id ttl=1s
func (S) M(ctx context.Context, id string) error { return nil }

//idem:key=id ttl=1s op=example.com/svc.S.M
func (S) N(ctx context.Context, id string) error { return nil }
`, []string{
			`14:25: op "example.com/svc.S.M" is already used by S.M at 12:10: give one of them another op=`,
		}},
		{"op too long", `//idem:key=id ttl=1s op=` + strings.Repeat("o", MaxOpLen+1) + `
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:25: op=oooooooooooooooooooooooooooooooo… is 1025 bytes, more than idem.MaxOpLen (1024)`,
		}},
		{"generic", `type G[T any] struct{}

//idem:key=id ttl=1s
func (G[T]) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:6: type G is generic: idemgen does not wrap generic types`,
		}},
		{"defaults without methods", `//idem:defaults ttl=1s
type D struct{}
`, []string{
			`11:1: //idem:defaults on type D, which has no annotated method: defaults apply only to methods with their own //idem: line`,
		}},
		{"op default", `//idem:defaults ttl=1s op=x
type D struct{}

//idem:key=id
func (D) M(ctx context.Context, id string) error { return nil }
`, []string{
			`11:24: op cannot be a type default: each method needs its own operation name`,
		}},
		{"all at once", `//idem:key=idd tll=1s
func (S) M(ctx context.Context, id string) error { return nil }

//idem:key=r.Nope ttl=1s lease=2s
func (S) N(ctx context.Context, r R) error { return nil }

func plain() {
	//idem:key=x
}
`, []string{
			`11:12: key: idd is not a parameter of S.M; did you mean "id"?`,
			`11:16: unknown option "tll"; did you mean "ttl"?`,
			`14:14: key: R has no field or method Nope`,
			`14:26: lease=2s is longer than ttl=1s`,
			`18:2: //idem: inside a function body: annotations go in the doc comment of a method`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantErrors(t, tt.body, tt.want) })
	}
}

// wantErrors resolves header+body as s.go and checks that it fails with
// exactly the errors want ("line:col: message"), in their sorted order.
func wantErrors(t *testing.T, body string, want []string) {
	t.Helper()
	_, p, err := load(t, map[string]string{"s.go": header + body})
	got := stripFile(errLines(err), "s.go")
	if !assert.Equal(t, want, got) {
		t.Logf("got:\n%s", strings.Join(got, "\n"))
	}
	assert.Nil(t, p)
}

// TestLeaseShorterThanTimeout: a lease shorter than one attempt's timeout
// (on the method or from the type's defaults) is refused at lease=, with
// the ways out; lease equal to timeout, renew=true, or no lease pass.
func TestLeaseShorterThanTimeout(t *testing.T) {
	const msg = `lease=1s is shorter than timeout=30s, the time one attempt may run: a call still running when its lease lapses is taken over by a retry and runs a second time; give lease=30s or longer, or renew=true (the lease is renewed while the method runs)`
	wantErrors(t, `//idem:key=id lease=1s timeout=30s retries=1
func (S) M(ctx context.Context, id string) error { return nil }
`, []string{`11:15: ` + msg})
	wantErrors(t, `//idem:defaults lease=1s
type T struct{}

//idem:key=id timeout=30s retries=1
func (T) M(ctx context.Context, id string) error { return nil }
`, []string{`11:17: for method T.M (from the //idem:defaults of T): ` + msg})
	for _, ok := range []string{
		`//idem:key=id lease=30s timeout=30s retries=1`,
		`//idem:key=id lease=1s timeout=30s retries=1 renew=true`,
		`//idem:key=id timeout=30s retries=1`,
		`//idem:key=id lease=1m timeout=30s retries=1 ttl=1h`,
	} {
		_, _, err := load(t, map[string]string{"s.go": header + ok + "\nfunc (S) M(ctx context.Context, id string) error { return nil }\n"})
		assert.NoError(t, err, ok)
	}
}

// TestStreamsRefused: an io.Reader anywhere in a hashed parameter (the
// parameter itself, a field, behind a pointer, a type whose pointer reads)
// is refused at the method with the ways out; left out with hash=, it
// passes.
func TestStreamsRefused(t *testing.T) {
	const pre = `type Rd struct{ n int }
func (*Rd) Read(p []byte) (int, error) { return 0, nil }
type Reader interface{ Read(p []byte) (int, error) }
type Upload struct{ Name string; Body Reader }
`
	for _, c := range []struct{ sig, path string }{
		{"r Reader", "r is a stream (Reader, an io.Reader)"},
		{"u Upload", "u.Body is a stream (Reader, an io.Reader)"},
		{"u *Upload", "u.Body is a stream (Reader, an io.Reader)"},
		{"rd Rd", "rd is a stream (Rd, an io.Reader)"},
		{"rd []*Rd", "rd[i] is a stream (*Rd, an io.Reader)"},
		{"r interface{ Read([]byte) (int, error) }", "r is a stream (an io.Reader)"},
	} {
		_, _, err := load(t, map[string]string{"s.go": header + pre + "//idem:key=id ttl=1h\nfunc (S) M(ctx context.Context, id string, " + c.sig + ") error { return nil }\n"})
		if assert.Error(t, err, c.sig) {
			assert.Contains(t, err.Error(), c.path, c.sig)
			assert.Contains(t, err.Error(), "read it into a []byte or string parameter before the call, or ", c.sig)
			assert.Contains(t, err.Error(), "hash=id", c.sig)
			// The way out is not what "cannot compare" describes, and
			// an io.Reader is not said to be an io.Reader.
			assert.NotContains(t, err.Error(), "before the call, which", c.sig)
			assert.NotContains(t, err.Error(), "is an io.Reader", c.sig)
		}
	}
	_, _, err := load(t, map[string]string{"s.go": header + pre + "//idem:key=id ttl=1h hash=id\nfunc (S) M(ctx context.Context, id string, r Reader) error { return nil }\n"})
	assert.NoError(t, err)
}
