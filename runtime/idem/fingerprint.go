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
	n   int    // bytes used in buf
	big []byte // the encoding, once it outgrows buf
	buf [256]byte
}

func (f *Hasher) writeString(s string) {
	if f.big == nil && f.n+len(s) <= len(f.buf) {
		f.n += copy(f.buf[f.n:], s)
		return
	}
	if f.big == nil {
		f.big = append(make([]byte, 0, 2*(f.n+len(s))), f.buf[:f.n]...)
	}
	f.big = append(f.big, s...)
}

func (f *Hasher) writeBytes(b []byte) {
	if f.big == nil && f.n+len(b) <= len(f.buf) {
		f.n += copy(f.buf[f.n:], b)
		return
	}
	if f.big == nil {
		f.big = append(make([]byte, 0, 2*(f.n+len(b))), f.buf[:f.n]...)
	}
	f.big = append(f.big, b...)
}

func (f *Hasher) header(kind byte, n int) {
	var h [1 + binary.MaxVarintLen64]byte
	h[0] = kind
	f.writeBytes(h[:1+binary.PutUvarint(h[1:], uint64(n))])
}

func (f *Hasher) write(kind byte, b []byte) {
	f.header(kind, len(b))
	f.writeBytes(b)
}

func (f *Hasher) word(kind byte, v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	f.write(kind, b[:])
}

// String adds a string.
func (f *Hasher) String(s string) {
	f.header('s', len(s))
	f.writeString(s)
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
// the method can: every field, exported or not (json:"-" fields too),
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

// Sum returns the fingerprint of everything added so far.
func (f *Hasher) Sum() (Fingerprint, error) {
	if f.err != nil {
		return Fingerprint{}, f.err
	}
	if f.big != nil {
		return sha256.Sum256(f.big), nil
	}
	return sha256.Sum256(f.buf[:f.n]), nil
}
