package annotations

import (
	"go/types"
	"strings"
)

// fingerprinterT is idem.Fingerprinter, built structurally.
var fingerprinterT = iface("IdemFingerprint", nil, byteSlice, errorType)

// selfFingerprinting reports whether t or *t implements idem.Fingerprinter
// (a method IdemFingerprint() ([]byte, error)): its fingerprint is what that
// method returns, in place of its fields. Interfaces are decided at run
// time, by their dynamic value.
func selfFingerprinting(t types.Type) bool {
	if types.IsInterface(t) {
		return false
	}
	if types.Implements(t, fingerprinterT) {
		return true
	}
	_, isPtr := t.Underlying().(*types.Pointer)
	return !isPtr && types.Implements(types.NewPointer(t), fingerprinterT)
}

// selfFingerprinting is the package-level selfFingerprinting, memoized:
// the resolver asks it of the same types for every method.
func (r *resolver) selfFingerprinting(t types.Type) bool {
	if v, ok := r.selfFP[t]; ok {
		return v
	}
	if r.selfFP == nil {
		r.selfFP = map[types.Type]bool{}
	}
	v := selfFingerprinting(t)
	r.selfFP[t] = v
	return v
}

// fingerprintCheck finds what a request fingerprint cannot compare in a
// hashed parameter: a channel, a function or an unsafe.Pointer anywhere in
// its type, exported or not (the fingerprint hashes every field, as the
// method sees every field). An interface is checked at run time, by its
// dynamic value; a type that implements idem.Fingerprinter says itself
// what counts. It returns the path to the offending value, from the
// parameter's name, and what it is; "" when the type is fine.
func (r *resolver) fingerprintCheck(name string, t types.Type) (path, what string) {
	seen := map[types.Type]bool{}
	var walk func(path string, t types.Type) (string, string)
	walk = func(path string, t types.Type) (string, string) {
		t = types.Unalias(t)
		if seen[t] || r.selfFingerprinting(t) {
			return "", ""
		}
		if _, named := t.(*types.Named); named {
			if isTime(t) {
				return "", ""
			}
			seen[t] = true
		}
		switch u := t.Underlying().(type) {
		case *types.Basic:
			if u.Kind() == types.UnsafePointer {
				return path, "an unsafe.Pointer"
			}
		case *types.Chan:
			return path, "a channel (" + r.typeString(t) + ")"
		case *types.Signature:
			return path, "a function (" + r.typeString(t) + ")"
		case *types.Pointer:
			return walk(path, u.Elem())
		case *types.Slice:
			return walk(path+"[i]", u.Elem())
		case *types.Array:
			return walk(path+"[i]", u.Elem())
		case *types.Map:
			if p, w := walk(path+" (a key)", u.Key()); p != "" {
				return p, w
			}
			return walk(path+"[k]", u.Elem())
		case *types.Struct:
			for i := range u.NumFields() {
				f := u.Field(i)
				if p, w := walk(path+"."+f.Name(), f.Type()); p != "" {
					return p, w
				}
			}
		}
		return "", ""
	}
	return walk(name, t)
}

// fingerprintWayOut names the ways out for parameter bad, which the
// fingerprint cannot compare: an IdemFingerprint method on its type, or
// hash= listing the hashed parameters that are not blind (or hash=none).
func (r *resolver) fingerprintWayOut(m *Method, bad int, blind map[int][2]string) string {
	p := m.Params[bad]
	method := "" // the parameter itself is a function or a channel: only hash= helps
	if n, ok := types.Unalias(deref(p.Type)).(*types.Named); ok && n.Obj().Pkg() == r.pkg {
		method = "give " + n.Obj().Name() + " an IdemFingerprint method (idem.Fingerprinter) that says what of it counts, or "
	} else if blind[bad][0] != p.Name {
		method = "wrap it in a type of this package with an IdemFingerprint method (idem.Fingerprinter) that says what of it counts, or "
	}
	var others []string
	for _, i := range m.Hash {
		if _, bad := blind[i]; !bad {
			others = append(others, m.Params[i].Name)
		}
	}
	if len(others) == 0 {
		return method + "leave " + p.Name + " out of the fingerprint with hash=none (a retry with the same key then replays whatever its arguments)"
	}
	return method + "leave " + p.Name + " out of the fingerprint with hash=" + strings.Join(others, ",")
}
