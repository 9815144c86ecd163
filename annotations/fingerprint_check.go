package annotations

import (
	"go/types"
	"slices"
	"strings"
)

// fingerprinterT is idem.Fingerprinter, built structurally.
var fingerprinterT = iface("IdemFingerprint", nil, byteSlice, errorType)

// readerT is io.Reader, built structurally.
var readerT = iface("Read", []types.Type{byteSlice}, types.Typ[types.Int], errorType)

// isReader reports whether t or *t implements io.Reader (an interface type
// that has a Read method too): a stream, whose value is its state
// (position, buffers, a file descriptor), not what it will read.
func isReader(t types.Type) bool {
	if types.Implements(t, readerT) {
		return true
	}
	_, isPtr := t.Underlying().(*types.Pointer)
	return !isPtr && !types.IsInterface(t) && types.Implements(types.NewPointer(t), readerT)
}

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

// blindSpot is a value in a hashed parameter that a fingerprint cannot
// compare: its path from the parameter's name, and what it is.
type blindSpot struct {
	path, what string
	stream     bool // an io.Reader: its way out is reading it before the call
}

// fingerprintCheck finds what a request fingerprint cannot compare in a
// hashed parameter: a channel, a function, an unsafe.Pointer or a stream
// (an io.Reader) anywhere in its type, exported or not (the fingerprint hashes every field, as the
// method sees every field). An interface is checked at run time, by its
// dynamic value; a type that implements idem.Fingerprinter says itself
// what counts. It returns every such value, with its path from the
// parameter's name (a named type is walked once); none when the type is
// fine.
func (r *resolver) fingerprintCheck(name string, t types.Type) []blindSpot {
	seen := map[types.Type]bool{}
	var spots []blindSpot
	var walk func(path string, t types.Type)
	walk = func(path string, t types.Type) {
		t = types.Unalias(t)
		if seen[t] || r.selfFingerprinting(t) {
			return
		}
		if _, named := t.(*types.Named); named {
			if isTime(t) {
				return
			}
			seen[t] = true
		}
		if isReader(t) {
			what := "a stream (" + r.typeString(t) + ", an io.Reader)"
			if _, named := t.(*types.Named); !named && types.IsInterface(t) {
				what = "a stream (an io.Reader)"
			} else if r.typeString(t) == "io.Reader" {
				what = "a stream (io.Reader)"
			}
			spots = append(spots, blindSpot{path: path, what: what, stream: true})
			return
		}
		switch u := t.Underlying().(type) {
		case *types.Basic:
			if u.Kind() == types.UnsafePointer {
				spots = append(spots, blindSpot{path: path, what: "an unsafe.Pointer"})
			}
		case *types.Chan:
			spots = append(spots, blindSpot{path: path, what: "a channel (" + r.typeString(t) + ")"})
		case *types.Signature:
			spots = append(spots, blindSpot{path: path, what: "a function (" + r.typeString(t) + ")"})
		case *types.Pointer:
			walk(path, u.Elem())
		case *types.Slice:
			walk(path+"[i]", u.Elem())
		case *types.Array:
			walk(path+"[i]", u.Elem())
		case *types.Map:
			walk(path+" (a key)", u.Key())
			walk(path+"[k]", u.Elem())
		case *types.Struct:
			for i := range u.NumFields() {
				f := u.Field(i)
				walk(path+"."+f.Name(), f.Type())
			}
		}
	}
	walk(name, t)
	return spots
}

// describeSpots writes blind spots as "a is X, b is Y and c is Z".
func describeSpots(spots []blindSpot) string {
	var b strings.Builder
	for i, s := range spots {
		switch {
		case i == 0:
		case i == len(spots)-1:
			b.WriteString(" and ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(s.path + " is " + s.what)
	}
	b.WriteString(", which a fingerprint cannot compare")
	if slices.ContainsFunc(spots, func(s blindSpot) bool { return s.stream }) {
		b.WriteString(" (a stream's fingerprint would be its state, position and buffers, not what it will read:" +
			" an equal retry would be refused and a read one replayed)")
	}
	return b.String()
}

// fingerprintWayOut names the ways out for parameter bad, which the
// fingerprint cannot compare: an IdemFingerprint method on its type, or
// hash= listing the hashed parameters that are not blind (or hash=none).
func (r *resolver) fingerprintWayOut(m *Method, bad int, blind map[int][]blindSpot) string {
	p := m.Params[bad]
	method := "" // the parameter itself is a function or a channel: only hash= helps
	if n, ok := types.Unalias(deref(p.Type)).(*types.Named); ok && n.Obj().Pkg() == r.pkg {
		method = "give " + n.Obj().Name() + " an IdemFingerprint method (idem.Fingerprinter) that says what of it counts, or "
	} else if blind[bad][0].path != p.Name {
		method = "wrap it in a type of this package with an IdemFingerprint method (idem.Fingerprinter) that says what of it counts, or "
	}
	if slices.ContainsFunc(blind[bad], func(s blindSpot) bool { return s.stream }) {
		method = "read it into a []byte or string parameter before the call, or " + method
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
