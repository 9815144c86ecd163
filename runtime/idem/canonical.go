package idem

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// fingerprintMaxDepth bounds how deep Hasher.Value follows a value, so that
// a cycle through slices or interfaces (which have no identity to detect
// it by) is an error rather than a stack overflow.
const fingerprintMaxDepth = 4096

var (
	timeType          = reflect.TypeFor[time.Time]()
	fingerprinterType = reflect.TypeFor[Fingerprinter]()
)

// Fingerprinter is implemented by a type that says itself what of its value
// forms a request fingerprint, in place of every field: Hasher.Value (and
// the generated wrapper) hashes the bytes IdemFingerprint returns. They
// must differ whenever the method would see a different value, and be the
// same for equal values in every process. Use it for a parameter type that
// holds what a fingerprint cannot compare (functions, channels, caches);
// the generator then accepts it. A nil pointer is hashed as nil, without a
// call.
type Fingerprinter interface {
	IdemFingerprint() ([]byte, error)
}

// canon writes the canonical encoding of a value for Hasher.Value: every
// field, exported or not, in declaration order; strings and byte slices as
// their exact bytes; floats by their bits (so -0 and +0 differ); nil apart
// from empty; map entries sorted by the encoding of their keys; the dynamic
// type of an interface by name; a time.Time as its instant only (not its
// monotonic reading, zone offset or zone name: the same instant sent from
// another time zone, or re-encoded by a client on retry, is the same
// request). Functions, channels and unsafe
// pointers cannot be compared and are an error unless nil; a pointer or map
// cycle is encoded as a reference to the depth it returns to.
type canon struct {
	buf   []byte
	seen  map[unsafe.Pointer]int // pointers and maps on the current path, to their depth
	path  []step                 // where the error is, innermost first, recorded as the walk unwinds
	depth int
	err   error
}

// step is one level of the walk's path: a field name, an index, or a map
// key.
type step struct {
	field string
	index int
	key   reflect.Value
}

func (c *canon) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

func (c *canon) where() string {
	if len(c.path) == 0 {
		return ""
	}
	var b bytes.Buffer
	b.WriteString("at ")
	for i := len(c.path) - 1; i >= 0; i-- {
		st := c.path[i]
		switch {
		case st.field != "":
			if i < len(c.path)-1 {
				b.WriteByte('.')
			}
			b.WriteString(st.field)
		case st.key.IsValid():
			b.WriteString(mapIndex(st.key))
		default:
			b.WriteString("[" + strconv.Itoa(st.index) + "]")
		}
	}
	b.WriteString(": ")
	return b.String()
}

func (c *canon) tag(kind byte)    { c.buf = append(c.buf, kind) }
func (c *canon) uvarint(n uint64) { c.buf = binary.AppendUvarint(c.buf, n) }
func (c *canon) word(v uint64)    { c.buf = binary.BigEndian.AppendUint64(c.buf, v) }
func (c *canon) bytes(b []byte)   { c.uvarint(uint64(len(b))); c.buf = append(c.buf, b...) }
func (c *canon) str(s string)     { c.uvarint(uint64(len(s))); c.buf = append(c.buf, s...) }

// failed records st on the path of an error found below it, and reports
// whether there is one.
func (c *canon) failed(st step) bool {
	if c.err == nil {
		return false
	}
	c.path = append(c.path, st)
	return true
}

// interfaceable returns v so that Interface may be called on it: a value read
// from an unexported field is re-read through its address (every value the
// walk reaches is addressable, or a copy that is).
func interfaceable(v reflect.Value) reflect.Value {
	if v.CanInterface() || !v.CanAddr() {
		return v
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

// addressable returns v, or an addressable copy of it when it is a struct
// or an array that is not (an interface's dynamic value, the root), so that
// its unexported fields can be read.
func addressable(v reflect.Value) reflect.Value {
	if v.CanAddr() || v.Kind() != reflect.Struct && v.Kind() != reflect.Array {
		return v
	}
	cp := reflect.New(v.Type()).Elem()
	cp.Set(v)
	return cp
}

func (c *canon) value(v reflect.Value) {
	if c.err != nil {
		return
	}
	if c.depth >= fingerprintMaxDepth {
		c.fail("value nested deeper than %d levels (a cycle through a slice or an interface?)", fingerprintMaxDepth)
		return
	}
	c.depth++
	v = interfaceable(v)
	if !c.fingerprinter(v) {
		c.kind(v)
	}
	c.depth--
}

// fingerprinter encodes v by its IdemFingerprint method, when it has one
// (on T, or on *T when v is addressable), and reports whether it did.
func (c *canon) fingerprinter(v reflect.Value) bool {
	t := v.Type()
	if t.Name() == "" && t.Kind() != reflect.Pointer || !v.CanInterface() {
		return false
	}
	var f Fingerprinter
	switch {
	case t.Kind() != reflect.Interface && t.NumMethod() > 0 && t.Implements(fingerprinterType):
		if t.Kind() == reflect.Pointer && v.IsNil() {
			c.tag('n')
			return true
		}
		f = v.Interface().(Fingerprinter)
	case t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && v.CanAddr() && reflect.PointerTo(t).Implements(fingerprinterType):
		f = v.Addr().Interface().(Fingerprinter)
	default:
		return false
	}
	b, err := f.IdemFingerprint()
	if err != nil {
		c.fail("%s.IdemFingerprint: %w", t, err)
		return true
	}
	c.tag('F')
	c.bytes(b)
	return true
}

// kind encodes v by its kind (see value).
func (c *canon) kind(v reflect.Value) {
	switch v.Kind() {
	case reflect.Bool:
		c.tag('b')
		if v.Bool() {
			c.buf = append(c.buf, 1)
		} else {
			c.buf = append(c.buf, 0)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		c.tag('i')
		c.word(uint64(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		c.tag('u')
		c.word(v.Uint())
	case reflect.Float32, reflect.Float64:
		c.tag('f')
		c.word(math.Float64bits(v.Float()))
	case reflect.Complex64, reflect.Complex128:
		c.tag('c')
		c.word(math.Float64bits(real(v.Complex())))
		c.word(math.Float64bits(imag(v.Complex())))
	case reflect.String:
		c.tag('s')
		c.str(v.String())
	case reflect.Slice:
		if v.IsNil() {
			c.tag('N')
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			c.tag('x')
			c.bytes(v.Bytes())
			return
		}
		c.tag('l')
		c.elems(v)
	case reflect.Array:
		c.tag('a')
		c.elems(addressable(v))
	case reflect.Pointer:
		if v.IsNil() {
			c.tag('n')
			return
		}
		if c.cycle(v.UnsafePointer()) {
			return
		}
		c.tag('p')
		c.value(v.Elem())
		delete(c.seen, v.UnsafePointer())
	case reflect.Map:
		c.mapValue(v)
	case reflect.Struct:
		c.structValue(v)
	case reflect.Interface:
		if v.IsNil() {
			c.tag('n')
			return
		}
		c.dynamic(v.Elem())
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		if v.IsNil() {
			c.tag('n')
			return
		}
		c.fail("a %s cannot be compared; leave it out of the fingerprint (hash=)", v.Type())
	default:
		c.fail("cannot encode a %s", v.Type())
	}
}

// dynamic encodes e, the dynamic value of a non-nil interface: its type by
// name, then its value. Every interface, at the root (canonicalInterface)
// or at any depth, is encoded here.
func (c *canon) dynamic(e reflect.Value) {
	c.tag('I')
	c.str(typeName(e.Type()))
	c.value(addressable(e))
}

// cycle reports whether p is already on the path, encoding a reference to
// it; otherwise it records p at the current depth.
func (c *canon) cycle(p unsafe.Pointer) bool {
	if d, ok := c.seen[p]; ok {
		c.tag('r')
		c.uvarint(uint64(c.depth - d))
		return true
	}
	if c.seen == nil {
		c.seen = map[unsafe.Pointer]int{}
	}
	c.seen[p] = c.depth
	return false
}

func (c *canon) elems(v reflect.Value) {
	c.uvarint(uint64(v.Len()))
	for i := range v.Len() {
		if c.value(v.Index(i)); c.failed(step{index: i}) {
			return
		}
	}
}

func (c *canon) structValue(v reflect.Value) {
	t := v.Type()
	if t == timeType {
		at := v.Interface().(time.Time)
		c.tag('t')
		c.word(uint64(at.Unix()))
		c.word(uint64(at.Nanosecond()))
		return
	}
	c.tag('S')
	c.uvarint(uint64(t.NumField()))
	for i := range t.NumField() {
		if c.value(v.Field(i)); c.err != nil {
			c.failed(step{field: t.Field(i).Name})
			return
		}
	}
}

func (c *canon) mapValue(v reflect.Value) {
	if v.IsNil() {
		c.tag('N')
		return
	}
	if c.cycle(v.UnsafePointer()) {
		return
	}
	defer delete(c.seen, v.UnsafePointer())
	// Each entry is encoded into c.buf after what is already there, then
	// the entries are sorted by their bytes: keys are distinct and their
	// encodings are not prefixes of one another, so the order is the keys'.
	start := len(c.buf)
	bounds := make([][2]int, 0, v.Len())
	k := reflect.New(v.Type().Key()).Elem()
	e := reflect.New(v.Type().Elem()).Elem()
	for it := v.MapRange(); it.Next(); {
		k.SetIterKey(it)
		e.SetIterValue(it)
		from := len(c.buf)
		c.value(k)
		if c.value(e); c.failed(step{key: k}) {
			return
		}
		bounds = append(bounds, [2]int{from, len(c.buf)})
	}
	entries := c.buf[start:]
	slices.SortFunc(bounds, func(a, b [2]int) int {
		return bytes.Compare(entries[a[0]-start:a[1]-start], entries[b[0]-start:b[1]-start])
	})
	sorted := make([]byte, 0, len(entries)+binary.MaxVarintLen64*(1+len(bounds)))
	sorted = append(sorted, 'm')
	sorted = binary.AppendUvarint(sorted, uint64(len(bounds)))
	for _, b := range bounds {
		sorted = binary.AppendUvarint(sorted, uint64(b[1]-b[0]))
		sorted = append(sorted, entries[b[0]-start:b[1]-start]...)
	}
	c.buf = append(c.buf[:start], sorted...)
}

// mapIndex names a map entry in an error: [key] for a string or integer
// key, [...] for others.
func mapIndex(k reflect.Value) string {
	switch k.Kind() {
	case reflect.String:
		return "[" + strconv.Quote(k.String()) + "]"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "[" + strconv.FormatInt(k.Int(), 10) + "]"
	}
	return "[...]"
}

// typeName names a dynamic type: a defined type by its package path and
// name (reflection writes the type arguments of an instance with their
// package paths), a type literal by its text when nothing in it belongs to
// a package, and otherwise by its structure with the package path of every
// defined type and unexported field in it: reflect's String writes package
// names, so that []a.T of two packages named a would be one name.
func typeName(t reflect.Type) string {
	if t.Name() != "" && t.PkgPath() != "" {
		return t.PkgPath() + "." + t.Name()
	}
	if t.Name() != "" || !qualified(t, 0) {
		return t.String()
	}
	var b strings.Builder
	writeTypeName(&b, t, 0)
	return b.String()
}

// typeNameDepth bounds the type literals typeName walks (a literal cannot
// refer to itself, but can be deep).
const typeNameDepth = 64

// qualified reports whether the literal t has a defined type of a package
// or an unexported field in it, so that its text is ambiguous.
func qualified(t reflect.Type, depth int) bool {
	if depth > typeNameDepth {
		return true
	}
	if t.Name() != "" {
		return t.PkgPath() != ""
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Chan:
		return qualified(t.Elem(), depth+1)
	case reflect.Map:
		return qualified(t.Key(), depth+1) || qualified(t.Elem(), depth+1)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.PkgPath != "" || qualified(f.Type, depth+1) {
				return true
			}
		}
	case reflect.Func:
		for i := range t.NumIn() {
			if qualified(t.In(i), depth+1) {
				return true
			}
		}
		for i := range t.NumOut() {
			if qualified(t.Out(i), depth+1) {
				return true
			}
		}
	case reflect.Interface:
		for i := range t.NumMethod() {
			if m := t.Method(i); m.PkgPath != "" || qualified(m.Type, depth+1) {
				return true
			}
		}
	}
	return false
}

// writeTypeName writes the literal t with package paths (see typeName).
func writeTypeName(b *strings.Builder, t reflect.Type, depth int) {
	if depth > typeNameDepth {
		b.WriteString("...")
		return
	}
	if t.Name() != "" {
		if t.PkgPath() != "" {
			b.WriteString(t.PkgPath() + ".")
		}
		b.WriteString(t.Name())
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		b.WriteString("*")
		writeTypeName(b, t.Elem(), depth+1)
	case reflect.Slice:
		b.WriteString("[]")
		writeTypeName(b, t.Elem(), depth+1)
	case reflect.Array:
		b.WriteString("[" + strconv.Itoa(t.Len()) + "]")
		writeTypeName(b, t.Elem(), depth+1)
	case reflect.Chan:
		b.WriteString(t.ChanDir().String() + " ")
		writeTypeName(b, t.Elem(), depth+1)
	case reflect.Map:
		b.WriteString("map[")
		writeTypeName(b, t.Key(), depth+1)
		b.WriteString("]")
		writeTypeName(b, t.Elem(), depth+1)
	case reflect.Struct:
		b.WriteString("struct {")
		for i := range t.NumField() {
			f := t.Field(i)
			if i > 0 {
				b.WriteString(";")
			}
			b.WriteString(" ")
			if f.PkgPath != "" {
				b.WriteString(f.PkgPath + ".")
			}
			b.WriteString(f.Name + " ")
			if f.Anonymous {
				b.WriteString("embedded ")
			}
			writeTypeName(b, f.Type, depth+1)
			if f.Tag != "" {
				b.WriteString(" " + strconv.Quote(string(f.Tag)))
			}
		}
		b.WriteString(" }")
	case reflect.Func:
		b.WriteString("func(")
		for i := range t.NumIn() {
			if i > 0 {
				b.WriteString(", ")
			}
			if t.IsVariadic() && i == t.NumIn()-1 {
				b.WriteString("...")
			}
			writeTypeName(b, t.In(i), depth+1)
		}
		b.WriteString(") (")
		for i := range t.NumOut() {
			if i > 0 {
				b.WriteString(", ")
			}
			writeTypeName(b, t.Out(i), depth+1)
		}
		b.WriteString(")")
	case reflect.Interface:
		b.WriteString("interface {")
		for i := range t.NumMethod() {
			m := t.Method(i)
			if i > 0 {
				b.WriteString(";")
			}
			b.WriteString(" ")
			if m.PkgPath != "" {
				b.WriteString(m.PkgPath + ".")
			}
			b.WriteString(m.Name + " ")
			writeTypeName(b, m.Type, depth+1)
		}
		b.WriteString(" }")
	default:
		b.WriteString(t.String())
	}
}

// canonicalInterface returns the canonical encoding of v as the value of an
// interface: 'n' for nil, else its dynamic type by name and its value, as
// canon encodes an interface at any depth.
func canonicalInterface(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return []byte{'n'}, nil
	}
	c := &canon{}
	c.depth++
	c.dynamic(rv)
	if c.err != nil {
		return nil, fmt.Errorf("idem: fingerprint: %s%w", c.where(), c.err)
	}
	return c.buf, nil
}

// canonical returns the canonical encoding of v (see canon).
func canonical(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return []byte{'n'}, nil
	}
	c := &canon{}
	c.value(addressable(rv))
	if c.err != nil {
		return nil, fmt.Errorf("idem: fingerprint: %s%w", c.where(), c.err)
	}
	return c.buf, nil
}
