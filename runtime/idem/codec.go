package idem

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Codec encodes results for storage and decodes them on replay. It must
// round-trip every result type of the wrapped methods; the generator rejects
// types JSON cannot carry (channels, functions, interfaces, unexported or
// json:"-" fields without a marshaler of the type's own).
//
// Marshal returns a slice of its own, which the executor hands to the store
// to keep (see Store.Complete): a codec must not reuse it afterwards.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default Codec (encoding/json). JSON strings are UTF-8:
// encoding/json would replace the bytes of a string that is not valid UTF-8
// with U+FFFD, and the replay would differ from the first result, so
// Marshal refuses such a string, naming where it is (binary data belongs in
// a []byte, which JSON carries exactly, as base64). Types with a
// MarshalJSON or MarshalText method of their own are theirs to encode.
type JSONCodec struct{}

// Marshal encodes v as JSON, or returns an error when v holds a string that
// is not valid UTF-8.
func (JSONCodec) Marshal(v any) ([]byte, error) {
	var b []byte
	var err error
	if m, ok := v.(JSONValueMarshaler); ok {
		b, err = m.MarshalJSONValue()
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return nil, err
	}
	// encoding/json writes an invalid byte as the escape \ufffd (and a
	// valid U+FFFD as itself), so only then is there something to find.
	if bytes.Contains(b, []byte(`\ufffd`)) {
		if where, ok := invalidUTF8(reflect.ValueOf(v), "", 0); ok {
			if where == "" {
				where = "the result"
			}
			return nil, fmt.Errorf("idem: JSON cannot carry the string at %s: it is not valid UTF-8 (use []byte for binary data, or another codec with idem.WithCodec)", where)
		}
	}
	return b, nil
}

// Unmarshal decodes JSON data into v, and refuses a stored object member
// that no field of v's type takes (json's DisallowUnknownFields, at every
// depth): a result field renamed by a deploy (Email to Mail) would
// otherwise replay a record stored before with Mail empty and no error. The
// executor reports the refusal as ErrUndecodable. Types with an
// UnmarshalJSON of their own decode as they decide.
func (JSONCodec) Unmarshal(data []byte, v any) error {
	if u, ok := v.(JSONValueUnmarshaler); ok && nonNilPointer(v) {
		return u.UnmarshalJSONValue(data)
	}
	if u, ok := v.(json.Unmarshaler); ok {
		// A type that decodes itself gets what encoding/json's Decoder
		// would give it, the value's bytes once they are known to be one
		// valid JSON value, without the Decoder: its buffer, its scanner
		// and its second scan of the value (idemhttp's stored response,
		// decoded on every replay). Anything else, a nil pointer and null
		// included, is the Decoder's to answer as before.
		if nonNilPointer(v) {
			if value := trimJSONSpace(data); len(value) > 0 && string(value) != "null" && json.Valid(value) {
				return u.UnmarshalJSON(value)
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("idem: JSON result followed by more data")
	}
	return nil
}

// JSONValueMarshaler is implemented by a result type that encodes itself
// as encoding/json would: MarshalJSONValue returns, in a slice of its own,
// the bytes json.Marshal returns for the value (compact, with <, >, &,
// U+2028 and U+2029 escaped), or an error where json.Marshal fails.
// JSONCodec.Marshal uses them as they are; for a json.Marshaler that does
// not have it, encoding/json checks, compacts and copies what MarshalJSON
// returns (a scan of the whole outcome). runtime/idemhttp's stored
// response is one: a first request encodes one.
type JSONValueMarshaler interface {
	MarshalJSONValue() ([]byte, error)
}

// JSONValueUnmarshaler is implemented by a result type that decodes JSON
// itself and checks its input while it does: UnmarshalJSONValue(data)
// decodes data as encoding/json would decode it into the type (one JSON
// value, JSON whitespace around it allowed) and fails on every input that
// encoding/json refuses. JSONCodec.Unmarshal hands such a type its data
// unchecked; a type with UnmarshalJSON alone gets its value only once
// encoding/json's scanner has checked it (a scan of the whole input).
// runtime/idemhttp's stored response is one: its replays decode one per
// request.
type JSONValueUnmarshaler interface {
	UnmarshalJSONValue(data []byte) error
}

// nonNilPointer reports whether v is a pointer that is not nil, the only
// value encoding/json decodes into.
func nonNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && !rv.IsNil()
}

// trimJSONSpace returns b without the whitespace JSON allows around a
// value.
func trimJSONSpace(b []byte) []byte {
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

var (
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// invalidUTF8 finds a string JSON would alter in what encoding/json
// encodes of v (exported fields, not json:"-"; not inside a type that
// marshals itself), and returns its path.
func invalidUTF8(v reflect.Value, path string, depth int) (string, bool) {
	if !v.IsValid() || depth > 1000 {
		return "", false
	}
	t := v.Type()
	if t.Implements(jsonMarshalerType) || t.Implements(textMarshalerType) {
		return "", false
	}
	switch v.Kind() {
	case reflect.String:
		return path, !utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return invalidUTF8(v.Elem(), path, depth+1)
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "", false
		}
		for i := range v.Len() {
			if p, ok := invalidUTF8(v.Index(i), path+"["+strconv.Itoa(i)+"]", depth+1); ok {
				return p, true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			k := it.Key()
			if k.Kind() == reflect.String && !utf8.ValidString(k.String()) {
				return path + "[" + strconv.Quote(k.String()) + "] (a map key)", true
			}
			if p, ok := invalidUTF8(it.Value(), path+mapIndex(k), depth+1); ok {
				return p, true
			}
		}
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if !f.IsExported() && !f.Anonymous || tag == "-" {
				continue
			}
			name := f.Name
			if n, _, _ := strings.Cut(tag, ","); n != "" {
				name = n
			}
			sub := name
			if path != "" {
				sub = path + "." + name
			}
			if p, ok := invalidUTF8(v.Field(i), sub, depth+1); ok {
				return p, true
			}
		}
	}
	return "", false
}
