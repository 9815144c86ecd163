package annotations

import (
	"go/types"
	"reflect"
)

// codecCheck finds what keeps a result type from round-tripping through
// the JSON codec: what JSON cannot encode (channels, functions, complex
// numbers, unsafe.Pointer, map keys it cannot write), what it cannot decode
// as it was (interfaces: an empty one gets JSON's own types back, one with
// methods gets nothing), and what it drops, so that a replay would differ
// from the first result (unexported fields, json:"-" fields). A type with a
// marshaler pair of its own (MarshalJSON and UnmarshalJSON, or MarshalText
// and UnmarshalText) is trusted to round-trip. Every problem is found, not
// only the first.
type codecCheck struct {
	r     *resolver
	seen  map[types.Type]bool
	depth int
}

// check returns what is wrong with t and where, one entry per problem;
// none when t round-trips.
func (c *codecCheck) check(t types.Type) []string {
	t = types.Unalias(t)
	if c.seen[t] || c.depth > 64 {
		return nil
	}
	if _, named := t.(*types.Named); named {
		c.seen[t] = true
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.custom(t) {
		return nil
	}
	ts := func() string { return c.r.typeString(t) } // for a message only
	switch u := t.Underlying().(type) {
	case *types.Basic:
		switch {
		case u.Kind() == types.UnsafePointer:
			return []string{ts() + " is an unsafe.Pointer: JSON cannot encode it"}
		case u.Info()&types.IsComplex != 0:
			return []string{ts() + " is a complex number: JSON cannot encode it"}
		}
	case *types.Chan:
		return []string{ts() + " is a channel: JSON cannot encode it"}
	case *types.Signature:
		return []string{ts() + " is a function: JSON cannot encode it"}
	case *types.Interface:
		if u.Empty() {
			return []string{ts() + " is an interface: JSON decodes into it only its own types (float64 for every number, " +
				"map[string]any for every object, []any for every array), so a replay would differ from the first result " +
				"(an int comes back as float64, a struct as map[string]any, an int64 over 2^53 rounded); use a concrete type"}
		}
		return []string{ts() + " is an interface with methods: JSON cannot decode a value into it, so a replay would fail; use a concrete type"}
	case *types.TypeParam:
		return []string{ts() + " is a type parameter"}
	case *types.Pointer:
		return c.check(u.Elem())
	case *types.Slice:
		return c.check(u.Elem())
	case *types.Array:
		return c.check(u.Elem())
	case *types.Map:
		var msgs []string
		if msg := c.mapKey(u.Key()); msg != "" {
			msgs = append(msgs, msg)
		}
		return append(msgs, c.check(u.Elem())...)
	case *types.Struct:
		return c.structType(t, u)
	}
	return nil
}

// custom reports whether t encodes itself: json.Marshaler and
// json.Unmarshaler, or encoding.TextMarshaler and TextUnmarshaler (on T or
// *T; decoding always has a pointer).
func (c *codecCheck) custom(t types.Type) bool {
	if _, isIface := t.Underlying().(*types.Interface); isIface {
		return false
	}
	p := types.NewPointer(t)
	has := func(m, u *types.Interface) bool {
		return (types.Implements(t, m) || types.Implements(p, m)) && types.Implements(p, u)
	}
	return has(jsonMarshal, jsonUnmarsh) || has(textMarshal, textUnmarsh)
}

// mapKey checks a map key type as encoding/json does: a string or integer
// kind, or a TextMarshaler and TextUnmarshaler.
func (c *codecCheck) mapKey(k types.Type) string {
	if b, ok := k.Underlying().(*types.Basic); ok && b.Info()&(types.IsString|types.IsInteger) != 0 {
		return ""
	}
	p := types.NewPointer(k)
	if (types.Implements(k, textMarshal) || types.Implements(p, textMarshal)) && types.Implements(p, textUnmarsh) {
		return ""
	}
	return "map key type " + c.r.typeString(k) + " is not a string or integer kind or an encoding.TextMarshaler"
}

// structType checks every field JSON would drop or cannot carry. An
// unexported embedded struct is flattened by JSON, so its fields are
// checked in its place.
func (c *codecCheck) structType(t types.Type, st *types.Struct) []string {
	marshalers := "give " + c.r.typeString(t) + " MarshalJSON and UnmarshalJSON methods that carry it"
	if _, named := t.(*types.Named); !named {
		marshalers = "use a named type with MarshalJSON and UnmarshalJSON methods that carry it"
	}
	wayOut := "; export it, or " + marshalers
	var msgs []string
	for i := range st.NumFields() {
		f := st.Field(i)
		field := "field " + structName(t) + f.Name()
		tag := reflect.StructTag(st.Tag(i)).Get("json")
		switch {
		case f.Name() == "_":
			continue
		case tag == "-":
			msgs = append(msgs, field+` is tagged json:"-": JSON drops it, so a replay would return it zeroed; remove the tag, or `+marshalers)
			continue
		case !f.Exported() && !f.Embedded():
			msgs = append(msgs, field+" is unexported: JSON drops it, so a replay would return it zeroed"+wayOut)
			continue
		case !f.Exported():
			switch u := f.Type().Underlying().(type) {
			case *types.Struct:
				for _, msg := range c.check(f.Type()) {
					msgs = append(msgs, field+": "+msg)
				}
				continue
			case *types.Pointer:
				if _, isStruct := u.Elem().Underlying().(*types.Struct); isStruct {
					msgs = append(msgs, field+" embeds a pointer to an unexported struct: JSON cannot allocate it on decode, so a replay would fail"+wayOut)
					continue
				}
			}
			msgs = append(msgs, field+" is an unexported embedded field: JSON drops it, so a replay would return it zeroed"+wayOut)
			continue
		}
		for _, msg := range c.check(f.Type()) {
			msgs = append(msgs, field+": "+msg)
		}
	}
	return msgs
}

// structName is "T." for a named struct type, "" for a struct literal.
func structName(t types.Type) string {
	if n, ok := t.(*types.Named); ok {
		return n.Obj().Name() + "."
	}
	return ""
}
