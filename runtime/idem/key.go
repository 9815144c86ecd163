package idem

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxReadableKey is the longest readable key form kept in a Key; longer forms
// are cut (the ID, a hash of the whole key, stays exact).
const MaxReadableKey = 256

// Key names one idempotency record: a tenant, an operation and the SHA-256 of
// the key parts. Records are scoped by tenant and operation, so the same parts
// under another tenant or operation are another record.
type Key struct {
	Tenant string
	Op     string
	// ID is the SHA-256 of the tenant, the operation and the parts in an
	// unambiguous (length-prefixed) encoding: "a"+"bc" and "ab"+"c" differ.
	ID [32]byte
	// Text is the readable form of the parts, for logs and debugging; at most
	// MaxReadableKey bytes.
	Text string
}

// String returns "tenant/op/text", for logs.
func (k Key) String() string {
	return k.Tenant + "/" + k.Op + "/" + k.Text
}

// Hex returns the ID in hexadecimal.
func (k Key) Hex() string { return hex.EncodeToString(k.ID[:]) }

// NewKey builds the Key for tenant, op and the given parts. It is the
// non-generated counterpart of KeyParts, for hand-written callers.
func NewKey(tenant, op string, parts ...string) (Key, error) {
	var p KeyParts
	for i, s := range parts {
		p.String("part "+strconv.Itoa(i), s)
	}
	return p.Key(tenant, op)
}

// KeyParts accumulates the parts of a key. Generated wrappers declare one on
// the stack and add each part of the annotation's key in order; the zero value
// is ready to use. A part that is empty makes Key return ErrMissingKey.
type KeyParts struct {
	enc     []byte
	text    []byte
	missing string
	err     error
	n       int
	scratch [128]byte
}

func (p *KeyParts) add(kind byte, b []byte, readable string) {
	if p.enc == nil {
		p.enc = p.scratch[:0]
	}
	p.enc = append(p.enc, kind)
	p.enc = binary.AppendUvarint(p.enc, uint64(len(b)))
	p.enc = append(p.enc, b...)
	if p.n > 0 {
		p.text = append(p.text, '+')
	}
	p.text = append(p.text, readable...)
	p.n++
}

func (p *KeyParts) markMissing(path string) {
	if p.missing == "" {
		p.missing = path
	}
}

// String adds a string part; path names it in ErrMissingKey when s is empty.
func (p *KeyParts) String(path, s string) {
	if s == "" {
		p.markMissing(path)
		return
	}
	p.add('s', []byte(s), s)
}

// Int adds a signed integer part.
func (p *KeyParts) Int(v int64) {
	var b [binary.MaxVarintLen64]byte
	p.add('i', binary.AppendVarint(b[:0], v), strconv.FormatInt(v, 10))
}

// Uint adds an unsigned integer part.
func (p *KeyParts) Uint(v uint64) {
	var b [binary.MaxVarintLen64]byte
	p.add('u', binary.AppendUvarint(b[:0], v), strconv.FormatUint(v, 10))
}

// Bool adds a boolean part.
func (p *KeyParts) Bool(v bool) {
	if v {
		p.add('b', []byte{1}, "true")
	} else {
		p.add('b', []byte{0}, "false")
	}
}

// Bytes adds a byte-array part (a UUID, say); path names it when it is all
// zero bytes or empty, which is treated as missing.
func (p *KeyParts) Bytes(path string, b []byte) {
	zero := true
	for _, c := range b {
		if c != 0 {
			zero = false
			break
		}
	}
	if zero {
		p.markMissing(path)
		return
	}
	p.add('x', b, hex.EncodeToString(b))
}

// Stringer adds the String() form of v.
func (p *KeyParts) Stringer(path string, v fmt.Stringer) {
	p.String(path, v.String())
}

// Text adds the MarshalText form of v; a marshalling error is returned by Key.
func (p *KeyParts) Text(path string, v encoding.TextMarshaler) {
	b, err := v.MarshalText()
	if err != nil {
		if p.err == nil {
			p.err = fmt.Errorf("idem: key part %s: %w", path, err)
		}
		return
	}
	p.String(path, string(b))
}

// Missing records that the part at path could not be read (a nil pointer on
// the way); Key then returns ErrMissingKey naming path.
func (p *KeyParts) Missing(path string) { p.markMissing(path) }

// Key returns the record key for tenant and op, or an error wrapping
// ErrMissingKey when a part was missing or empty.
func (p *KeyParts) Key(tenant, op string) (Key, error) {
	if p.err != nil {
		return Key{}, p.err
	}
	if p.missing != "" {
		return Key{}, &MissingKeyError{Op: op, Path: p.missing}
	}
	if p.n == 0 {
		return Key{}, &MissingKeyError{Op: op, Path: "(no parts)"}
	}
	buf := make([]byte, 0, 2*binary.MaxVarintLen64+len(tenant)+len(op)+len(p.enc))
	buf = binary.AppendUvarint(buf, uint64(len(tenant)))
	buf = append(buf, tenant...)
	buf = binary.AppendUvarint(buf, uint64(len(op)))
	buf = append(buf, op...)
	buf = append(buf, p.enc...)
	k := Key{Tenant: tenant, Op: op, ID: sha256.Sum256(buf), Text: readable(p.text)}
	return k, nil
}

func readable(b []byte) string {
	if len(b) <= MaxReadableKey {
		return string(b)
	}
	b = b[:MaxReadableKey]
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return string(b)
}

// Derive returns a stable child key for a downstream step of the operation
// that parent identifies: the same parent and step give the same child on
// every retry, so a chain A→B→C retried from the top reaches B and C with the
// keys of the first attempt. Different steps give different keys.
func Derive(parent, step string) string {
	h := sha256.New()
	var lb [binary.MaxVarintLen64]byte
	h.Write(binary.AppendUvarint(lb[:0], uint64(len(parent))))
	h.Write([]byte(parent))
	h.Write([]byte(step))
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:16])
}

type keyCtx struct{}

// WithKey returns ctx carrying the idempotency key of the current call, as
// the executor does before it runs a method (and so before an idemhttp
// handler runs).
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// KeyFrom returns the idempotency key of the call that ctx belongs to: the
// hex form of the record key (Key.Hex), inside a wrapped method and inside an
// idemhttp handler alike. It is scoped by tenant and operation, unlike the
// raw Idempotency-Key header, so keys derived from it for downstream calls
// cannot collide across tenants. Use Derive on it for downstream calls.
func KeyFrom(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtx{}).(string)
	return k, ok
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
