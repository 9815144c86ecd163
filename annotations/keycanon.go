package annotations

import (
	"go/types"
)

// isTime reports whether t is time.Time.
func isTime(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "time" && n.Obj().Name() == "Time"
}

// timeLike reports whether t is time.Time or a type defined as time.Time
// (`type Deadline time.Time`), which shares its underlying struct.
func timeLike(t types.Type) bool {
	if isTime(t) {
		return true
	}
	st, ok := t.Underlying().(*types.Struct)
	if !ok || st.NumFields() == 0 {
		return false
	}
	// Only package time can declare a struct of its unexported fields.
	pkg := st.Field(0).Pkg()
	if pkg == nil || pkg.Path() != "time" || st.Field(0).Exported() {
		return false
	}
	tt, ok := pkg.Scope().Lookup("Time").(*types.TypeName)
	return ok && types.Identical(st, tt.Type().Underlying())
}

// canonicalKey handles the key parts whose obvious encoding is not
// canonical. A time.Time (or *time.Time, or a type defined as time.Time
// without a String or MarshalText method of its own) is keyed by its
// instant: its String carries the location and the monotonic reading, and
// its MarshalText the zone offset, so the same instant decoded from JSON in
// another zone would be another key. A type whose String or MarshalText is
// time.Time's, promoted from an embedded field, is refused for the same
// reason. ok is false when t is none of these.
func (r *resolver) canonicalKey(t types.Type, addressable bool) (enc Encoding, msg string, ok bool) {
	base := deref(t)
	if timeLike(base) && (isTime(base) || !hasMethod(base, "String") && !hasMethod(base, "MarshalText")) {
		return EncTime, "", true
	}
	if isTime(base) {
		return 0, "", false
	}
	for _, name := range []string{"String", "MarshalText"} {
		fn := method(t, name, addressable)
		if fn == nil {
			continue
		}
		recv := fn.Type().(*types.Signature).Recv()
		if recv != nil && isTime(deref(recv.Type())) {
			return 0, "its " + name + " method is time.Time's, promoted from an embedded field: it carries the location" +
				" (and String the monotonic reading), so the same instant would make different keys; key by the embedded time" +
				" field, which is keyed by its instant, or give " + r.typeString(base) + " a " + name + " method of its own", true
		}
		return 0, "", false // the method keyEncoding will use is the type's own
	}
	return 0, "", false
}

// hasMethod reports whether t or *t has a method name.
func hasMethod(t types.Type, name string) bool {
	return method(t, name, true) != nil
}

// method returns the method name of t (or of *t, when addressable).
func method(t types.Type, name string, addressable bool) *types.Func {
	obj, _, _ := types.LookupFieldOrMethod(t, addressable, nil, name)
	fn, _ := obj.(*types.Func)
	return fn
}
