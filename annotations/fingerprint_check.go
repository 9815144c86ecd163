package annotations

import (
	"go/types"
	"strings"
)

// fingerprintCheck finds what a request fingerprint cannot compare in a
// hashed parameter: a channel, a function or an unsafe.Pointer anywhere in
// its type, exported or not (the fingerprint hashes every field, as the
// method sees every field). An interface is checked at run time, by its
// dynamic value. It returns the path to the offending value, from the
// parameter's name, and what it is; "" when the type is fine.
func (r *resolver) fingerprintCheck(name string, t types.Type) (path, what string) {
	seen := map[types.Type]bool{}
	var walk func(path string, t types.Type) (string, string)
	walk = func(path string, t types.Type) (string, string) {
		t = types.Unalias(t)
		if seen[t] {
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

// fingerprintWayOut names the ways out for a parameter the fingerprint
// cannot compare: hash= listing the hashed parameters that are not blind,
// or hash=none.
func fingerprintWayOut(m *Method, blind map[int][2]string) string {
	var others []string
	for _, i := range m.Hash {
		if _, bad := blind[i]; !bad {
			others = append(others, m.Params[i].Name)
		}
	}
	if len(others) == 0 {
		return "leave it out of the fingerprint with hash=none (a retry with the same key then replays whatever its arguments)"
	}
	return "leave it out of the fingerprint with hash=" + strings.Join(others, ",") + ", or make it a value that can be compared"
}
