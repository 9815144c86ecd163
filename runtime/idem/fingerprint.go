package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// Hasher builds a request Fingerprint from the parameters an annotation
// hashes (all but the context, by default). Generated wrappers call the typed
// adders for basic kinds and Value for the rest; the encoding is canonical
// (length-prefixed; JSON for composite values, which sorts map keys), so the
// same arguments give the same fingerprint in every process.
type Hasher struct {
	buf     []byte
	err     error
	scratch [256]byte
}

func (f *Hasher) header(kind byte, n int) {
	if f.buf == nil {
		f.buf = f.scratch[:0]
	}
	f.buf = append(f.buf, kind)
	f.buf = binary.AppendUvarint(f.buf, uint64(n))
}

func (f *Hasher) write(kind byte, b []byte) {
	f.header(kind, len(b))
	f.buf = append(f.buf, b...)
}

// String adds a string.
func (f *Hasher) String(s string) {
	f.header('s', len(s))
	f.buf = append(f.buf, s...)
}

// Int adds a signed integer.
func (f *Hasher) Int(v int64) {
	f.header('i', 8)
	f.buf = binary.BigEndian.AppendUint64(f.buf, uint64(v))
}

// Uint adds an unsigned integer.
func (f *Hasher) Uint(v uint64) {
	f.header('u', 8)
	f.buf = binary.BigEndian.AppendUint64(f.buf, v)
}

// Float adds a floating-point number.
func (f *Hasher) Float(v float64) {
	f.header('f', 8)
	f.buf = binary.BigEndian.AppendUint64(f.buf, math.Float64bits(v))
}

// Bool adds a boolean.
func (f *Hasher) Bool(v bool) {
	b := byte(0)
	if v {
		b = 1
	}
	f.header('b', 1)
	f.buf = append(f.buf, b)
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
	if f.err != nil {
		return Fingerprint{}, f.err
	}
	return sha256.Sum256(f.buf), nil
}
