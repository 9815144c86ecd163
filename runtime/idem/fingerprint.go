package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"math"
)

// Hasher builds a request Fingerprint from the parameters an annotation
// hashes (all but the context, by default). Generated wrappers call the typed
// adders for basic kinds and Value for the rest; the encoding is canonical
// (length-prefixed; JSON for composite values, which sorts map keys), so the
// same arguments give the same fingerprint in every process.
type Hasher struct {
	h   hash.Hash
	err error
	buf [binary.MaxVarintLen64 + 1]byte
}

func (f *Hasher) init() {
	if f.h == nil {
		f.h = sha256.New()
	}
}

func (f *Hasher) write(kind byte, b []byte) {
	f.init()
	f.buf[0] = kind
	n := binary.PutUvarint(f.buf[1:], uint64(len(b)))
	f.h.Write(f.buf[:1+n])
	f.h.Write(b)
}

// String adds a string.
func (f *Hasher) String(s string) {
	f.init()
	f.buf[0] = 's'
	n := binary.PutUvarint(f.buf[1:], uint64(len(s)))
	f.h.Write(f.buf[:1+n])
	if hw, ok := f.h.(interface{ WriteString(string) (int, error) }); ok {
		hw.WriteString(s)
		return
	}
	f.h.Write([]byte(s))
}

// Int adds a signed integer.
func (f *Hasher) Int(v int64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v))
	f.write('i', b[:])
}

// Uint adds an unsigned integer.
func (f *Hasher) Uint(v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	f.write('u', b[:])
}

// Float adds a floating-point number.
func (f *Hasher) Float(v float64) { f.Uint(math.Float64bits(v)) }

// Bool adds a boolean.
func (f *Hasher) Bool(v bool) {
	if v {
		f.write('b', []byte{1})
	} else {
		f.write('b', []byte{0})
	}
}

// Bytes adds a byte slice.
func (f *Hasher) Bytes(b []byte) { f.write('x', b) }

// Value adds any other value through its JSON encoding. An encoding error is
// kept and returned by Sum.
func (f *Hasher) Value(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		if f.err == nil {
			f.err = fmt.Errorf("idem: fingerprint: %w", err)
		}
		return
	}
	f.write('j', b)
}

// Sum returns the fingerprint of everything added so far.
func (f *Hasher) Sum() (Fingerprint, error) {
	var fp Fingerprint
	if f.err != nil {
		return fp, f.err
	}
	f.init()
	f.h.Sum(fp[:0])
	return fp, nil
}
