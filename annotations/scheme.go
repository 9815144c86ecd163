package annotations

import (
	"fmt"
	"go/types"
	"hash/fnv"
	"strconv"
	"strings"
)

// fingerprintEncoding versions the fingerprint's encoding: the adders the
// wrapper calls for each parameter and the runtime's canonical encoding
// behind idem.Hasher.Value. Change it whenever either changes, so that every
// Scheme changes with it.
const fingerprintEncoding = 2

// scheme is the Scheme of m's fingerprint (see schemeOf).
func (r *resolver) scheme(m *Method) uint32 {
	params := make([]types.Type, len(m.Fingerprint))
	flat := make([]bool, len(m.Fingerprint))
	for i, hp := range m.Fingerprint {
		params[i] = m.Params[hp.Param].Type
		flat[i] = len(hp.Values) > 0 && hp.Values[0].Field != ""
	}
	return r.schemeOf(m.HashNone, params, flat)
}

// schemeOf derives idem.Method.Scheme: the 32-bit FNV-1a hash of the
// encoding version and the layout of the hashed parameters' types, in
// order. The layout is their structure as the fingerprint encodes it
// (kinds, element types, fields in order, time.Time apart) and not their
// names, so a rename keeps the scheme and a new field, a changed field type
// or another hashed parameter changes it; so does a struct that moves
// between the typed adders and the canonical encoding (flat[i]: params[i]
// is hashed field by field). Never 0, which means unknown.
func (r *resolver) schemeOf(none bool, params []types.Type, flat []bool) uint32 {
	var b strings.Builder
	b.WriteString("idemgen fingerprint " + strconv.Itoa(fingerprintEncoding))
	if none {
		b.WriteString(" none")
	}
	for i, t := range params {
		b.WriteString("; ")
		if flat[i] {
			b.WriteString("fields ")
		} else if isByteSlice(t) {
			// Since encoding 2, nil apart from empty (h.Nil, h.Bytes).
			b.WriteString("nil or ")
		}
		r.layout(&b, t, nil, false)
	}
	if strings.Contains(b.String(), "interface") {
		// Since encoding 2, every interface's dynamic type is written by
		// its package path (a parameter of an interface type too, with
		// Hasher.Interface): the fingerprints of the methods that hash an
		// interface changed, and only theirs, so only their schemes change
		// (a record stored before replays, EventSchemeChanged, rather than
		// refusing a retry across the deploy as a mismatch).
		b.WriteString("; interfaces by path")
	}
	h := fnv.New32a()
	h.Write([]byte(b.String()))
	if s := h.Sum32(); s != 0 {
		return s
	}
	return 1
}

// layoutHash derives Method.Layout: the 32-bit FNV-1a hash of the layout of
// the hashed parameters' types as reflection sees them (byte is uint8,
// rune is int32), which idem.CheckLayout computes again from the types the
// program was built with. Never 0.
func (r *resolver) layoutHash(m *Method) uint32 {
	var b strings.Builder
	b.WriteString("idemgen layout 1")
	for _, hp := range m.Fingerprint {
		b.WriteString("; ")
		if len(hp.Values) > 0 && hp.Values[0].Field != "" {
			b.WriteString("fields ")
		}
		r.layout(&b, m.Params[hp.Param].Type, nil, true)
	}
	h := fnv.New32a()
	h.Write([]byte(b.String()))
	if s := h.Sum32(); s != 0 {
		return s
	}
	return 1
}

// layout writes the structure of t; outer holds the named types being
// written, so that a recursive type refers back to its level. With
// reflect, basic types are written as reflection names them (byte as
// uint8, rune as int32, unsafe.Pointer as Pointer): see layoutHash.
func (r *resolver) layout(b *strings.Builder, t types.Type, outer []types.Type, reflect bool) {
	t = types.Unalias(t)
	if r.selfFingerprinting(t) {
		b.WriteString("fingerprinter") // its bytes are its own
		return
	}
	if n, ok := t.(*types.Named); ok {
		if isTime(n) {
			b.WriteString("time")
			return
		}
		for i, o := range outer {
			if types.Identical(o, t) {
				fmt.Fprintf(b, "@%d", len(outer)-i)
				return
			}
		}
		outer = append(outer, t)
	}
	switch u := t.Underlying().(type) {
	case *types.Basic:
		name := u.Name()
		if reflect {
			name = types.Typ[u.Kind()].Name() // byte and rune are aliases
		}
		b.WriteString(name)
	case *types.Pointer:
		b.WriteString("*")
		r.layout(b, u.Elem(), outer, reflect)
	case *types.Slice:
		b.WriteString("[]")
		r.layout(b, u.Elem(), outer, reflect)
	case *types.Array:
		fmt.Fprintf(b, "[%d]", u.Len())
		r.layout(b, u.Elem(), outer, reflect)
	case *types.Map:
		b.WriteString("map[")
		r.layout(b, u.Key(), outer, reflect)
		b.WriteString("]")
		r.layout(b, u.Elem(), outer, reflect)
	case *types.Struct:
		b.WriteString("struct{")
		for i := range u.NumFields() {
			if i > 0 {
				b.WriteString("; ")
			}
			r.layout(b, u.Field(i).Type(), outer, reflect)
		}
		b.WriteString("}")
	case *types.Chan:
		b.WriteString("chan")
	case *types.Signature:
		b.WriteString("func")
	case *types.Interface:
		b.WriteString("interface") // the dynamic value carries its own type name
	default:
		b.WriteString(t.String()) // a type parameter
	}
}
