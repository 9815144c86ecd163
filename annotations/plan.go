package annotations

import "go/types"

// This file holds the resolver's type decisions that the templates print:
// how each key part's value and each hashed value is converted for the
// adder that takes it, which structs are hashed field by field, and the
// fingerprint scheme (scheme.go). The templates only spell what is decided
// here (issue 15).

// bytesT is []byte spelled with the predeclared byte (types.Typ[types.Byte]
// is uint8 by name), the type generated code converts to.
var bytesT = types.NewSlice(types.Universe.Lookup("byte").Type())

// keyConversion returns how the wrapper passes a key part of type t,
// encoded as enc, to its KeyParts adder:
//
//	k.String("id", string(id))          a named string type
//	k.Int(int64(req.Seq))               k.Uint(uint64(n))
//	k.Bytes("id", id[:])                k.Bytes("id", []byte(string(id[:])))   [N]B of a named byte type B
//	k.Stringer("id", &id)               only *T has String (an addressable value)
//	k.Time("at", *at)                   k.Time("d", time.Time(d))
func keyConversion(t types.Type, enc Encoding) Conversion {
	switch enc {
	case EncString:
		return convertTo(t, types.Typ[types.String])
	case EncInt:
		return convertTo(t, types.Typ[types.Int64])
	case EncUint:
		return convertTo(t, types.Typ[types.Uint64])
	case EncBool:
		return convertTo(t, types.Typ[types.Bool])
	case EncBytes:
		return bytesConversion(t)
	case EncStringer:
		return Conversion{Addr: onlyPointerHas(t, "String")}
	case EncTextMarshal:
		return Conversion{Addr: onlyPointerHas(t, "MarshalText")}
	case EncTime:
		var c Conversion
		if ptr, ok := t.Underlying().(*types.Pointer); ok {
			c.Deref, t = true, ptr.Elem()
		}
		if !isTime(t) {
			c.To = timeType(t)
		}
		return c
	}
	return Conversion{}
}

// timeType returns time.Time for a type defined as time.Time (its
// underlying struct is time.Time's), found through the package of its
// first field, or nil.
func timeType(t types.Type) types.Type {
	st, ok := t.Underlying().(*types.Struct)
	if !ok || st.NumFields() == 0 || st.Field(0).Pkg() == nil {
		return nil
	}
	obj := st.Field(0).Pkg().Scope().Lookup("Time")
	if obj == nil || !isTime(obj.Type()) {
		return nil
	}
	return obj.Type()
}

// convertTo converts to the adder's type when t is not identical to it.
func convertTo(t, to types.Type) Conversion {
	if types.Identical(t, to) {
		return Conversion{}
	}
	return Conversion{To: to}
}

// bytesConversion converts a byte-like value to []byte: an array of bytes
// is sliced, v[:]; an array or slice of a named byte type (type B byte)
// goes through string, which converts from any slice of a byte kind, since
// []B does not convert to []byte; a slice of bytes is converted as needed.
//
//	id[:]   []byte(string(id[:]))   []byte(string(bs))   []byte(raw)   raw
func bytesConversion(t types.Type) Conversion {
	byteT := types.Typ[types.Byte]
	switch u := t.Underlying().(type) {
	case *types.Array:
		if types.Identical(u.Elem(), byteT) {
			return Conversion{Slice: true}
		}
		return Conversion{Slice: true, ViaString: true, To: bytesT}
	case *types.Slice:
		if !types.Identical(u.Elem(), byteT) {
			return Conversion{ViaString: true, To: bytesT}
		}
	}
	return convertTo(t, bytesT)
}

// onlyPointerHas reports whether *t has the method and t does not, so
// that the wrapper passes &v.
func onlyPointerHas(t types.Type, method string) bool {
	if types.IsInterface(t) {
		return false
	}
	return types.NewMethodSet(t).Lookup(nil, method) == nil && types.NewMethodSet(types.NewPointer(t)).Lookup(nil, method) != nil
}

// hashPlan returns how the wrapper adds the parameter of type t to the
// request fingerprint: a flat struct field by field with typed adders
// (behind a nil check for a pointer to one), anything else as one value
// (hashValue).
func (r *resolver) hashPlan(param int, t types.Type) HashParam {
	hp := HashParam{Param: param}
	fields, ok := r.flatFields(t)
	if !ok {
		if ptr, isPtr := t.Underlying().(*types.Pointer); isPtr {
			fields, ok = r.flatFields(ptr.Elem())
			hp.NilCheck = ok
		}
	}
	if !ok {
		hv := hashValue("", t)
		hp.Values = []HashValue{hv}
		// A nil byte slice is nil, apart from an empty one, as everywhere
		// else in a fingerprint (h.Bytes alone writes both as no bytes).
		hp.NilCheck = hv.Adder == "Bytes" && isByteSlice(t)
		return hp
	}
	for _, f := range fields {
		hp.Values = append(hp.Values, hashValue(f.Name(), f.Type()))
	}
	return hp
}

// isByteSlice reports whether t is a slice of bytes ([]byte or a named
// type of it), which the wrapper hashes with h.Bytes behind a nil check.
func isByteSlice(t types.Type) bool {
	s, ok := t.Underlying().(*types.Slice)
	if !ok {
		return false
	}
	b, ok := s.Elem().(*types.Basic)
	return ok && b.Kind() == types.Byte
}

// flatFields returns the fields of a struct type whose every field is of a
// basic kind (string, integer, float or bool), so that the fingerprint can
// hash them without reflection: all of them, exported or not and whatever
// their json tag, as the method sees them all. ok is false for anything
// else, and for a struct with an unexported field of another package than
// r.pkg (the generated code's), which the wrapper cannot name, and for a type
// that implements idem.Fingerprinter, whose method says what counts.
func (r *resolver) flatFields(t types.Type) (fields []*types.Var, ok bool) {
	st, isStruct := t.Underlying().(*types.Struct)
	if !isStruct || r.selfFingerprinting(t) {
		return nil, false
	}
	for f := range st.Fields() {
		if f.Embedded() || !f.Exported() && (f.Pkg() == nil || r.pkg == nil || f.Pkg().Path() != r.pkg.Path()) || f.Name() == "_" {
			return nil, false
		}
		b, isBasic := f.Type().Underlying().(*types.Basic)
		if !isBasic || b.Info()&(types.IsString|types.IsInteger|types.IsFloat|types.IsBoolean) == 0 ||
			b.Info()&types.IsComplex != 0 || b.Kind() == types.UnsafePointer {
			return nil, false
		}
		fields = append(fields, f)
	}
	return fields, len(fields) > 0
}

// hashValue is one adder call: h.String(s), h.Int(int64(n)), h.Bytes(b),
// h.Interface(v) for a value of an interface type (its dynamic type by
// name, then its value: passed as an any, only the dynamic value would be
// left), h.Value(v) for the canonical encoding of anything else.
func hashValue(field string, t types.Type) HashValue {
	if types.IsInterface(t) {
		return HashValue{Field: field, Adder: "Interface"}
	}
	if b, ok := t.Underlying().(*types.Basic); ok {
		switch info := b.Info(); {
		case info&types.IsString != 0:
			return HashValue{Field: field, Adder: "String", Conv: convertTo(t, types.Typ[types.String])}
		case info&types.IsInteger != 0 && info&types.IsUnsigned != 0:
			return HashValue{Field: field, Adder: "Uint", Conv: convertTo(t, types.Typ[types.Uint64])}
		case info&types.IsInteger != 0:
			return HashValue{Field: field, Adder: "Int", Conv: convertTo(t, types.Typ[types.Int64])}
		case info&types.IsFloat != 0:
			return HashValue{Field: field, Adder: "Float", Conv: convertTo(t, types.Typ[types.Float64])}
		case info&types.IsBoolean != 0:
			return HashValue{Field: field, Adder: "Bool", Conv: convertTo(t, types.Typ[types.Bool])}
		}
	}
	if s, ok := t.Underlying().(*types.Slice); ok {
		if b, ok := s.Elem().(*types.Basic); ok && b.Kind() == types.Byte {
			return HashValue{Field: field, Adder: "Bytes", Conv: convertTo(t, bytesT)}
		}
	}
	return HashValue{Field: field, Adder: "Value"}
}
