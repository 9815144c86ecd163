package annotations

import (
	"go/types"
	"reflect"
	"strings"
)

// codecCheck finds what keeps a type from round-tripping through the JSON
// codec (or, with marshalOnly, from being encoded for a fingerprint: then
// interfaces are fine, a marshaler alone is enough, and only a parameter
// that is itself a struct with no exported fields is reported, as the
// fingerprint would not see it).
type codecCheck struct {
	r           *resolver
	marshalOnly bool
	seen        map[types.Type]bool
	depth       int
}

// check returns "" when t is fine, or what is wrong and where.
func (c *codecCheck) check(t types.Type) string {
	t = types.Unalias(t)
	if c.seen[t] || c.depth > 64 {
		return ""
	}
	if _, named := t.(*types.Named); named {
		c.seen[t] = true
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.custom(t) {
		return ""
	}
	ts := c.r.typeString(t)
	switch u := t.Underlying().(type) {
	case *types.Basic:
		switch {
		case u.Kind() == types.UnsafePointer:
			return ts + " is an unsafe.Pointer"
		case u.Info()&types.IsComplex != 0:
			return ts + " is a complex number"
		}
	case *types.Chan:
		return ts + " is a channel"
	case *types.Signature:
		return ts + " is a function"
	case *types.Interface:
		if !c.marshalOnly {
			return ts + " is an interface: JSON cannot decode into it (use a concrete type)"
		}
	case *types.TypeParam:
		return ts + " is a type parameter"
	case *types.Pointer:
		return c.check(u.Elem())
	case *types.Slice:
		return c.check(u.Elem())
	case *types.Array:
		return c.check(u.Elem())
	case *types.Map:
		if msg := c.mapKey(u.Key()); msg != "" {
			return msg
		}
		return c.check(u.Elem())
	case *types.Struct:
		return c.structType(t, u)
	}
	return ""
}

// custom reports whether t encodes itself: json.Marshaler and
// json.Unmarshaler, or encoding.TextMarshaler and TextUnmarshaler (on T or
// *T; decoding always has a pointer). With marshalOnly, the marshaler alone
// is enough.
func (c *codecCheck) custom(t types.Type) bool {
	if _, isIface := t.Underlying().(*types.Interface); isIface {
		return false
	}
	p := types.NewPointer(t)
	has := func(m, u *types.Interface) bool {
		if !types.Implements(t, m) && !types.Implements(p, m) {
			return false
		}
		return c.marshalOnly || types.Implements(p, u)
	}
	return has(jsonMarshal, jsonUnmarsh) || has(textMarshal, textUnmarsh)
}

// mapKey checks a map key type as encoding/json does: a string or integer
// kind, or a TextMarshaler (and TextUnmarshaler, to decode).
func (c *codecCheck) mapKey(k types.Type) string {
	if b, ok := k.Underlying().(*types.Basic); ok && b.Info()&(types.IsString|types.IsInteger) != 0 {
		return ""
	}
	p := types.NewPointer(k)
	if (types.Implements(k, textMarshal) || types.Implements(p, textMarshal)) && (c.marshalOnly || types.Implements(p, textUnmarsh)) {
		return ""
	}
	return "map key type " + c.r.typeString(k) + " is not a string or integer kind or an encoding.TextMarshaler"
}

func (c *codecCheck) structType(t types.Type, st *types.Struct) string {
	state := false
	for i := range st.NumFields() {
		f := st.Field(i)
		name, _, _ := strings.Cut(reflect.StructTag(st.Tag(i)).Get("json"), ",")
		if name == "-" && !strings.HasPrefix(reflect.StructTag(st.Tag(i)).Get("json"), "-,") {
			continue
		}
		if !f.Exported() {
			if !f.Embedded() {
				continue
			}
			if _, isStruct := deref(f.Type()).Underlying().(*types.Struct); !isStruct {
				continue
			}
		}
		state = true
		if msg := c.check(f.Type()); msg != "" {
			return "field " + structName(c.r, t) + f.Name() + ": " + msg
		}
	}
	if !state && (!c.marshalOnly || c.depth == 1) {
		return c.r.typeString(t) + " has no exported fields, so nothing of it survives; export them, or implement json.Marshaler and json.Unmarshaler"
	}
	return ""
}

func structName(r *resolver, t types.Type) string {
	if n, ok := t.(*types.Named); ok {
		return n.Obj().Name() + "."
	}
	return ""
}
