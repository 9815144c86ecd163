package idem

import (
	"fmt"
	"hash/fnv"
	"reflect"
	"strings"
)

// StaleRunGoGenerate returns v. Code that idemgen generates wraps the values
// of its compile-time layout checks in it (the signature of each wrapped
// method, the type at each step of a key path, the fields of a struct hashed
// field by field), so that when one of them no longer matches what the code
// was generated from, the compiler's message names what to do:
//
//	idem_gen.go:47:17: cannot use idem.StaleRunGoGenerate(req.ID) (value of type int) as string value in variable declaration
//
// The checks sit in functions that are never called; StaleRunGoGenerate
// never runs. Its name is part of the generated-code contract (see
// GeneratedCodeVersion1).
func StaleRunGoGenerate[T any](v T) T { return v }

// Hashed is one hashed parameter of a generated wrapper, for CheckLayout:
// its type as the program was built, and whether the wrapper hashes it
// field by field (a struct of basic fields) rather than with Hasher.Value.
type Hashed struct {
	Type   reflect.Type
	Fields bool
}

// HashedParam returns the Hashed of a parameter of type T.
func HashedParam[T any](fields bool) Hashed {
	return Hashed{Type: reflect.TypeFor[T](), Fields: fields}
}

// CheckLayout returns nil when the hashed parameters have the layout the
// wrapper of op was generated for (want, which the generator derived from
// the same types with go/types), and otherwise an error wrapping
// ErrStaleWrapper that says to run go generate. Generated code calls it
// once, when the package is initialized, and stores the result in
// Method.Stale: Do then refuses every call of a stale wrapper, before
// anything is claimed.
//
// It covers what the generated file cannot check at compile time (see
// StaleRunGoGenerate): the unexported fields of another package's types,
// and types the file cannot name. The layout is the structure the
// fingerprint encodes (kinds, element types, the types of every field in
// order, exported or not), not names.
func CheckLayout(op string, want uint32, params ...Hashed) error {
	var b strings.Builder
	b.WriteString("idemgen layout 1")
	for _, p := range params {
		b.WriteString("; ")
		if p.Fields {
			b.WriteString("fields ")
		}
		writeLayout(&b, p.Type, nil)
	}
	h := fnv.New32a()
	h.Write([]byte(b.String()))
	got := h.Sum32()
	if got == 0 {
		got = 1
	}
	if got == want {
		return nil
	}
	return fmt.Errorf("%w: %.64q: the types of its hashed parameters changed since idemgen generated it (layout %#08x, generated for %#08x): run go generate",
		ErrStaleWrapper, op, got, want)
}

// writeLayout writes the structure of t as the generator's layout does
// (annotations, scheme.go) from go/types; outer holds the named types
// being written, so that a recursive type refers back to its level.
func writeLayout(b *strings.Builder, t reflect.Type, outer []reflect.Type) {
	if t.Kind() != reflect.Interface && (t.Implements(fingerprinterType) ||
		t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(fingerprinterType)) {
		b.WriteString("fingerprinter")
		return
	}
	if t.Name() != "" && t.PkgPath() != "" {
		if t == timeType {
			b.WriteString("time")
			return
		}
		for i, o := range outer {
			if o == t {
				fmt.Fprintf(b, "@%d", len(outer)-i)
				return
			}
		}
		outer = append(outer, t)
	}
	switch t.Kind() {
	case reflect.Pointer:
		b.WriteString("*")
		writeLayout(b, t.Elem(), outer)
	case reflect.Slice:
		b.WriteString("[]")
		writeLayout(b, t.Elem(), outer)
	case reflect.Array:
		fmt.Fprintf(b, "[%d]", t.Len())
		writeLayout(b, t.Elem(), outer)
	case reflect.Map:
		b.WriteString("map[")
		writeLayout(b, t.Key(), outer)
		b.WriteString("]")
		writeLayout(b, t.Elem(), outer)
	case reflect.Struct:
		b.WriteString("struct{")
		for i := range t.NumField() {
			if i > 0 {
				b.WriteString("; ")
			}
			writeLayout(b, t.Field(i).Type, outer)
		}
		b.WriteString("}")
	case reflect.Chan:
		b.WriteString("chan")
	case reflect.Func:
		b.WriteString("func")
	case reflect.Interface:
		b.WriteString("interface")
	case reflect.UnsafePointer:
		b.WriteString("Pointer")
	default:
		b.WriteString(t.Kind().String())
	}
}
