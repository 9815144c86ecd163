package idemhttp

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestResponseJSON: the stored response's JSON methods write exactly the
// bytes encoding/json writes for its fields (so that records written before
// them, or by a process without them, read the same), and read back what
// encoding/json reads, for table cases and for random responses over an
// alphabet of the characters JSON escapes.
func TestResponseJSON(t *testing.T) {
	cases := []response{
		{},
		{Status: 204},
		{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/o-1"}}, Body: []byte(`{"id":"o-1"}`)},
		{Status: 200, Header: http.Header{"Link": {`</a>; rel="next"`, "<b&c>"}}, Body: []byte{0, 1, 2, 0xff}},
		{Status: 200, Header: http.Header{"X": {"tab\there", `back\slash`, "ünï", "\u2028", "\x7f"}, "Empty": {}, "Nil": nil}},
		{Status: 406, Selected: http.Header{"Accept-Encoding": nil, "Accept-Language": {"en", "fr"}}},
		{Status: 200, Header: http.Header{}, Selected: http.Header{}, Body: []byte{}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		cases = append(cases, randomResponse(rng))
	}
	for i, r := range cases {
		want, err := json.Marshal(plainResponse(r))
		if err != nil {
			t.Fatal(err)
		}
		got, err := idem.JSONCodec{}.Marshal(r) // as the executor encodes it
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if string(got) != string(want) {
			t.Fatalf("case %d: encoded\n%s\nencoding/json writes\n%s", i, got, want)
		}
		var back, plain response
		if err := (idem.JSONCodec{}).Unmarshal(want, &back); err != nil {
			t.Fatalf("case %d: decode %s: %v", i, want, err)
		}
		if err := json.Unmarshal(want, (*plainResponse)(&plain)); err != nil {
			t.Fatal(err)
		}
		if !equalResponse(back, plain) {
			t.Fatalf("case %d: decoded %#v, encoding/json decodes %#v", i, back, plain)
		}
	}
	// Forms only encoding/json writes or accepts (escapes, spaces, other
	// field order, unknown fields) go the slow way, to the same result.
	for _, in := range []string{
		`{"body":"AAE=","status":200}`,
		`{ "status" : 201 , "header" : { "A" : [ "b" ] } }`,
		`{"status":200,"header":{"A":["\u0041\"b"]}}`,
		`{"Status":200}`,
		`{"status":200,"extra":true}`,
		`{"status":200,"body":"AAE"}`,
	} {
		var fast, plain response
		fastErr := json.Unmarshal([]byte(in), &fast)
		plainErr := json.Unmarshal([]byte(in), (*plainResponse)(&plain))
		if (fastErr == nil) != (plainErr == nil) || !equalResponse(fast, plain) {
			t.Errorf("%s: decoded %#v (%v), encoding/json decodes %#v (%v)", in, fast, fastErr, plain, plainErr)
		}
	}
	// A field that JSON cannot carry unaltered is refused, as idem.JSONCodec
	// refuses such a string: the outcome is then not stored.
	for _, h := range []http.Header{{"X": {"a\xffb"}}, {"X\xff": {"v"}}} {
		if _, err := (idem.JSONCodec{}).Marshal(response{Status: 200, Header: h}); !errors.Is(err, errNotUTF8) {
			t.Errorf("header %q encoded, err %v, want errNotUTF8", h, err)
		}
	}
}

// equalResponse compares two responses, a nil and an empty body alike (the
// body is omitted from JSON when empty).
func equalResponse(a, b response) bool {
	return a.Status == b.Status && string(a.Body) == string(b.Body) &&
		reflect.DeepEqual(a.Header, b.Header) && reflect.DeepEqual(a.Selected, b.Selected)
}

func randomResponse(rng *rand.Rand) response {
	const alphabet = "aZ09-_ ;=,/\"\\<>&\t\n\x01\x7fé€😀\u2028"
	runes := []rune(alphabet)
	str := func() string {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
		return b.String()
	}
	header := func() http.Header {
		if rng.IntN(4) == 0 {
			return nil
		}
		h := http.Header{}
		for range rng.IntN(5) {
			k := str()
			switch rng.IntN(5) {
			case 0:
				h[k] = nil
			default:
				vs := []string{}
				for range rng.IntN(3) {
					vs = append(vs, str())
				}
				h[k] = vs
			}
		}
		return h
	}
	r := response{Status: 100 + rng.IntN(500), Header: header(), Selected: header()}
	if n := rng.IntN(40); n > 0 {
		r.Body = make([]byte, n)
		for i := range r.Body {
			r.Body[i] = byte(rng.IntN(256))
		}
	}
	return r
}

// TestResponseJSONUnchecked: idem.JSONCodec hands the stored response its
// record without checking that it is JSON (idem.JSONValueUnmarshaler), so
// the response's decoder must refuse, or decode as encoding/json does,
// every input: for every record of TestResponseJSON's kinds, every
// truncation of it and every byte of it replaced by (or preceded by) a
// byte that matters to JSON, JSONCodec.Unmarshal fails exactly when
// encoding/json's Decoder (what JSONCodec used before) fails or the input
// is not one JSON value, and decodes the same response when it does not.
func TestResponseJSONUnchecked(t *testing.T) {
	decoder := func(data []byte, v *response) error { // JSONCodec before
		if !json.Valid(data) {
			// Also a value followed by '}' or ']', which the Decoder's
			// More did not see as more data.
			return errors.New("not one JSON value")
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return err
		}
		if dec.More() {
			return errors.New("more data")
		}
		return nil
	}
	records := []response{
		{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/o-1"}}, Body: []byte(`{"id":"o-1"}`)},
		{Status: 200, Header: http.Header{"Empty": {}, "Nil": nil}, Selected: http.Header{"Accept-Encoding": nil}, Body: []byte{0, 0xff}},
		{Status: 0},
	}
	const bytesThatMatter = "0 \t\"\\{}[],:-1nx\x01\xff"
	n := 0
	for _, r := range records {
		rec, err := idem.JSONCodec{}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var inputs [][]byte
		for i := 0; i <= len(rec); i++ {
			inputs = append(inputs, rec[:i])
			for _, c := range []byte(bytesThatMatter) {
				if i < len(rec) {
					inputs = append(inputs, append(append(append([]byte{}, rec[:i]...), c), rec[i+1:]...))
				}
				inputs = append(inputs, append(append(append([]byte{}, rec[:i]...), c), rec[i:]...))
			}
		}
		for _, in := range inputs {
			var got, want response
			gotErr := idem.JSONCodec{}.Unmarshal(in, &got)
			wantErr := decoder(in, &want)
			if (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%q: error %v, encoding/json's Decoder %v", in, gotErr, wantErr)
			}
			if gotErr == nil && !equalResponse(got, want) {
				t.Fatalf("%q: decoded %#v, encoding/json's Decoder %#v", in, got, want)
			}
			n++
		}
	}
	t.Logf("%d inputs", n)
}
