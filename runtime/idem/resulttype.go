package idem

import (
	"crypto/sha256"
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"sync"
)

// This file lets a replay under JSONCodec skip the strict decoder when it
// can: see docs/decisions/result-shape.md.
//
// JSONCodec.Unmarshal refuses a stored object member that no field of the
// result type takes (DisallowUnknownFields), so that a deploy that renamed
// a result field replays ErrUndecodable instead of a result with the field
// empty. That strictness costs a json.Decoder per replay. A stored body can
// hold an unknown member only when the type that encoded it differs from
// the type that decodes it, so the executor keeps, in the outcome's Meta
// (tag metaResultShape), a hash of the encoding type's shape as
// encoding/json sees it (CallMeta.ResultShape), and decodes with plain
// json.Unmarshal when the record's shape is the current type's. A record without the field (written
// by an earlier release, or by another codec) or with another hash is
// decoded strictly, as before.

// resultMetas caches resultMeta: reflect.Type → []byte. It is a memo of a
// pure function of the type, as encoding/json's own field cache.
var resultMetas sync.Map

// resultMeta returns the Meta that names t's shape alone
// (CallMeta.ResultShape), or nil when t has none (see shapeWriter.opaque:
// its replays are decoded strictly). The slice is shared by every outcome
// of t and never written to: its capacity is its length, so an append
// copies it.
func resultMeta(t reflect.Type) []byte {
	if m, ok := resultMetas.Load(t); ok {
		return m.([]byte)
	}
	var s shapeWriter
	s.seen = map[reflect.Type]int{}
	s.write(t)
	var m []byte
	if !s.opaque {
		sum := sha256.Sum256(s.b)
		m = CallMeta{ResultShape: [8]byte(sum[:8])}.Append(nil)
		m = m[:len(m):len(m)]
	}
	v, _ := resultMetas.LoadOrStore(t, m)
	return v.([]byte)
}

// sameResultType reports whether meta says that its body was encoded from a
// type of the shape that shape (resultMeta's) names. Meta that cannot be
// read says nothing.
func sameResultType(meta, shape []byte) bool {
	if len(meta) == 0 || len(shape) < 8 {
		return false
	}
	m, err := ParseMeta(meta)
	if err != nil || m.ResultShape == [8]byte{} {
		return false
	}
	return [8]byte(shape[len(shape)-8:]) == m.ResultShape
}

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// shapeWriter writes the shape of a type as encoding/json encodes and
// decodes it: kinds, and for structs every field's name, exportedness,
// embedding, json tag and type, at every depth; a type that marshals or
// unmarshals itself is a leaf (its methods decide, strictly or not alike).
// Anything that can change which members a body holds or a type takes
// changes the shape; so do some changes that cannot (a field's Go name
// under a json tag), which only cost a strict decode.
type shapeWriter struct {
	b    []byte
	seen map[reflect.Type]int // types being or already written, for recursive types
	// opaque is set when a type encodes itself (json.Marshaler,
	// encoding.TextMarshaler) but decodes by encoding/json's rules: what
	// it writes is its method's, which a deploy can change without
	// changing the shape, so its replays keep the strict decoder.
	opaque bool
}

func (s *shapeWriter) str(v string) {
	s.b = strconv.AppendInt(s.b, int64(len(v)), 10)
	s.b = append(s.b, ':')
	s.b = append(s.b, v...)
}

func (s *shapeWriter) write(t reflect.Type) {
	if i, ok := s.seen[t]; ok {
		s.b = append(s.b, '@')
		s.b = strconv.AppendInt(s.b, int64(i), 10)
		s.b = append(s.b, ';')
		return
	}
	s.seen[t] = len(s.seen)
	pt := reflect.PointerTo(t)
	var has [4]bool
	for i, it := range []reflect.Type{jsonUnmarshalerType, textUnmarshalerType, jsonMarshalerType, textMarshalerType} {
		if t.Implements(it) || pt.Implements(it) {
			has[i] = true
			s.b = append(s.b, 'm')
			s.b = strconv.AppendInt(s.b, int64(i), 10)
		}
	}
	if (has[2] || has[3]) && !has[0] && !has[1] {
		s.opaque = true
	}
	s.b = append(s.b, '(')
	s.str(t.Kind().String())
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		s.write(t.Elem())
	case reflect.Array:
		s.b = strconv.AppendInt(s.b, int64(t.Len()), 10)
		s.write(t.Elem())
	case reflect.Map:
		s.write(t.Key())
		s.write(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			s.str(f.Name)
			flags := byte('0')
			if f.IsExported() {
				flags |= 1
			}
			if f.Anonymous {
				flags |= 2
			}
			s.b = append(s.b, flags)
			s.str(f.Tag.Get("json"))
			s.write(f.Type)
		}
	}
	s.b = append(s.b, ')')
}
