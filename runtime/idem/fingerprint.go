package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
)

// Hasher builds a request Fingerprint from the parameters an annotation
// hashes (all but the context, by default). Generated wrappers call the typed
// adders for basic kinds and Value for the rest; the encoding is canonical
// (length-prefixed, exact bytes; see Value for composite values), so the
// same arguments give the same fingerprint in every process, and arguments
// that differ in anything the method sees give different fingerprints.
type Hasher struct {
	err error
	enc scratch
}

func (f *Hasher) header(kind byte, n int) {
	var h [1 + binary.MaxVarintLen64]byte
	h[0] = kind
	put(&f.enc, h[:1+binary.PutUvarint(h[1:], uint64(n))])
}

func (f *Hasher) write(kind byte, b []byte) {
	f.header(kind, len(b))
	put(&f.enc, b)
}

func (f *Hasher) word(kind byte, v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	f.write(kind, b[:])
}

// String adds a string.
func (f *Hasher) String(s string) {
	f.header('s', len(s))
	put(&f.enc, s)
}

// Int adds a signed integer.
func (f *Hasher) Int(v int64) { f.word('i', uint64(v)) }

// Uint adds an unsigned integer.
func (f *Hasher) Uint(v uint64) { f.word('u', v) }

// Float adds a floating-point number.
func (f *Hasher) Float(v float64) { f.word('f', math.Float64bits(v)) }

// Bool adds a boolean.
func (f *Hasher) Bool(v bool) {
	if v {
		f.write('b', []byte{1})
	} else {
		f.write('b', []byte{0})
	}
}

// Nil adds a nil pointer: a parameter whose fields would otherwise be added
// one by one (generated code hashes a flat struct field by field).
func (f *Hasher) Nil() { f.header('n', 0) }

// Bytes adds a byte slice.
func (f *Hasher) Bytes(b []byte) { f.write('x', b) }

// Value adds any other value in a canonical encoding that sees everything
// the method can, from the value's own type (the root's type is the
// parameter's, known to the wrapper: see Interface for a parameter of an
// interface type): every field, exported or not (json:"-" fields too),
// strings and byte slices byte for byte (invalid UTF-8 included), nil apart
// from empty, floats by their bits, map entries in key order, the dynamic
// type of an interface, and a time.Time as its instant (not its zone).
// A non-nil function, channel or unsafe pointer cannot be compared: the
// error is kept and returned by Sum.
func (f *Hasher) Value(v any) {
	b, err := canonical(v)
	if err != nil {
		if f.err == nil {
			f.err = err
		}
		return
	}
	f.write('v', b)
}

// Interface adds the value of a parameter whose static type is an
// interface (any, error, a named interface): nil, or the dynamic type by
// name (package path and name, type arguments included) followed by the
// canonical encoding of the dynamic value (see Value). It encodes the value
// exactly as Value encodes an interface inside a composite value (a struct
// field, an element, a map key or value), so that A{1} and B{1}, or int(1)
// and int64(1), differ wherever they are. Value alone cannot: its argument,
// an any, holds only the dynamic value.
func (f *Hasher) Interface(v any) {
	b, err := canonicalInterface(v)
	if err != nil {
		if f.err == nil {
			f.err = err
		}
		return
	}
	f.write('v', b)
}

// Sum returns the fingerprint of everything added so far.
func (f *Hasher) Sum() (Fingerprint, error) {
	if f.err != nil {
		return Fingerprint{}, f.err
	}
	return sha256.Sum256(f.enc.bytes()), nil
}

// scratch is the encoding KeyParts and Hasher build: in an array inside
// its owner (on the generated wrapper's stack) until it outgrows it, then
// on the heap.
type scratch struct {
	n   int    // bytes used in buf
	big []byte // the encoding, once it outgrows buf
	buf [256]byte
}

// put appends b to s.
func put[B string | []byte](s *scratch, b B) {
	if s.big == nil && s.n+len(b) <= len(s.buf) {
		s.n += copy(s.buf[s.n:], b)
		return
	}
	if s.big == nil {
		s.big = append(make([]byte, 0, 2*(s.n+len(b))), s.buf[:s.n]...)
	}
	s.big = append(s.big, b...)
}

// bytes returns the encoding so far.
func (s *scratch) bytes() []byte {
	if s.big != nil {
		return s.big
	}
	return s.buf[:s.n]
}
