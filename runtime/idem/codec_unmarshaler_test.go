package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// rawValue decodes itself by keeping the bytes it is given, and counts the
// calls.
type rawValue struct {
	got   []byte
	calls int
}

func (r *rawValue) UnmarshalJSON(b []byte) error {
	r.got, r.calls = bytes.Clone(b), r.calls+1
	if bytes.Equal(b, []byte(`"refuse"`)) {
		return errors.New("refused by the type")
	}
	return nil
}

// decoderUnmarshal is what JSONCodec.Unmarshal did before its shortcut for
// types that decode themselves: the reference it must still agree with.
func decoderUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more data")
	}
	return nil
}

// TestJSONCodecUnmarshalerAsDecoder: for a type with its own UnmarshalJSON,
// JSONCodec.Unmarshal (which skips encoding/json's Decoder for one valid
// value) calls it with the same bytes, as many times, and fails on the same
// inputs as the Decoder does: whitespace around the value, trailing data,
// invalid JSON, null, an empty input, every kind of value, the type's own
// refusal, a nil pointer.
func TestJSONCodecUnmarshalerAsDecoder(t *testing.T) {
	inputs := []string{
		`{"a":1}`, ` {"a":1}`, "\n\t{\"a\": [1, 2, {\"b\": null}]}\r\n ", `{"a":1} `,
		`{"a":1} {"b":2}`, `{"a":1}x`, `{"a":1`, `{"a":}`, `{a:1}`, ``, `   `,
		`null`, ` null `, `nul`, `"s"`, `"refuse"`, `12`, `-1.5e3`, `true`, `[1,"x"]`,
		`"\u00e9\ud83d\ude00"`, "\"\xff\"", `{"a":1}{"a":1}`, `[`, `]`,
	}
	for _, in := range inputs {
		var want, got rawValue
		wantErr := decoderUnmarshal([]byte(in), &want)
		gotErr := idem.JSONCodec{}.Unmarshal([]byte(in), &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Errorf("%q: error %v, the Decoder's %v", in, gotErr, wantErr)
		}
		if !bytes.Equal(got.got, want.got) || got.calls != want.calls {
			t.Errorf("%q: UnmarshalJSON got %q (%d calls), from the Decoder %q (%d calls)", in, got.got, got.calls, want.got, want.calls)
		}
	}
	var nilPtr *rawValue
	if err := (idem.JSONCodec{}).Unmarshal([]byte(`{"a":1}`), nilPtr); err == nil {
		t.Error("a nil pointer: no error")
	}
}

// checkedValue decodes itself and checks its input (idem.JSONValueUnmarshaler).
type checkedValue struct{ got []byte }

func (c *checkedValue) UnmarshalJSONValue(b []byte) error { c.got = bytes.Clone(b); return nil }
func (c *checkedValue) UnmarshalJSON(b []byte) error      { return errors.New("not called") }

// TestJSONCodecValueUnmarshaler: a type that checks its own input gets the
// data as stored, unchecked and whole (whitespace, trailing bytes and
// all), and a nil pointer of it is refused as encoding/json refuses one.
func TestJSONCodecValueUnmarshaler(t *testing.T) {
	for _, in := range []string{`{"a":1}`, " {\"a\":1}\n", `{"a":1}}`, `not json`, ``} {
		var v checkedValue
		if err := (idem.JSONCodec{}).Unmarshal([]byte(in), &v); err != nil || string(v.got) != in {
			t.Errorf("%q: got %q, %v", in, v.got, err)
		}
	}
	var nilPtr *checkedValue
	if err := (idem.JSONCodec{}).Unmarshal([]byte(`{}`), nilPtr); err == nil {
		t.Error("a nil pointer: no error")
	}
}

// encodedValue encodes itself as encoding/json would (idem.JSONValueMarshaler).
type encodedValue struct{ b string }

func (e encodedValue) MarshalJSONValue() ([]byte, error) { return []byte(e.b), nil }
func (e encodedValue) MarshalJSON() ([]byte, error)      { return nil, errors.New("not called") }

// TestJSONCodecValueMarshaler: a type that encodes itself as encoding/json
// would has its bytes stored as they are, without encoding/json's
// compaction (the type answers for them).
func TestJSONCodecValueMarshaler(t *testing.T) {
	for _, in := range []string{`{"a":1}`, `[1,2]`, `"x"`} {
		got, err := idem.JSONCodec{}.Marshal(encodedValue{in})
		if err != nil || string(got) != in {
			t.Errorf("%q: stored %q, %v", in, got, err)
		}
	}
}

// selfDecoded encodes as a JSON string and decodes itself through
// UnmarshalJSONValue alone (its UnmarshalJSON fails).
type selfDecoded struct{ S string }

func (s selfDecoded) MarshalJSON() ([]byte, error) { return json.Marshal(s.S) }
func (s *selfDecoded) UnmarshalJSONValue(b []byte) error {
	return json.Unmarshal(b, &s.S)
}
func (s *selfDecoded) UnmarshalJSON([]byte) error { return errors.New("UnmarshalJSON called") }

// TestReplayUsesValueUnmarshaler: a replay through Do decodes a
// JSONValueUnmarshaler by its own method, whether the record's result
// shape is the current type's (the fast path) or not (the codec), for a
// value and a pointer result.
func TestReplayUsesValueUnmarshaler(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "codec.Value", TTL: time.Minute}
	for range 2 {
		v, err := call(t.Context(), ex, m, "v", func(context.Context) (selfDecoded, error) { return selfDecoded{S: "receipt"}, nil })
		if err != nil || v.S != "receipt" {
			t.Fatalf("value result: %+v, %v", v, err)
		}
	}
	mp := &idem.Method{Op: "codec.Pointer", TTL: time.Minute}
	for range 2 {
		v, err := call(t.Context(), ex, mp, "p", func(context.Context) (*selfDecoded, error) { return &selfDecoded{S: "receipt"}, nil })
		if err != nil || v == nil || v.S != "receipt" {
			t.Fatalf("pointer result: %+v, %v", v, err)
		}
	}
}
