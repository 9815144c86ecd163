package idem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"
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
	// MaxReadableKey bytes. It may carry personal data: errors name a key by
	// Hex instead. The executor leaves it empty in the keys it passes a
	// LocalStore when no observer can read it (see LocalStore).
	Text string
}

// String returns "tenant/op/text", for debugging; it carries the tenant and
// the key's text, which may be personal data (Hex does not).
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
//
// Parts are kept in an unambiguous encoding (a kind byte, a length, the
// bytes), in a buffer inside the value, so that a typical key costs no
// allocation until Key builds its readable form.
type KeyParts struct {
	missing string
	err     error
	parts   int
	enc     scratch
	// scope and scopeEnd: the tenant Tenant added as the first part, and
	// where its encoding ends; promoted: id made it the key's tenant.
	scope    string
	scopeEnd int
	promoted bool
}

func (p *KeyParts) header(kind byte, n int) {
	var h [1 + binary.MaxVarintLen64]byte
	h[0] = kind
	put(&p.enc, h[:1+binary.PutUvarint(h[1:], uint64(n))])
	p.parts++
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
	p.header('s', len(s))
	put(&p.enc, s)
}

// Tenant adds the tenant a door (idemhttp, idemgrpc) read from the
// request, before any other part. When the executor names no tenant
// (SingleTenant, or a WithTenant function that returned ""), it becomes the
// key's tenant, so that the store scopes and counts the record by it (a
// tenant share: memstore.WithTenantShare); otherwise it is a part named
// "tenant", and both scope the key. An empty t makes Key return
// ErrMissingKey naming "tenant".
func (p *KeyParts) Tenant(t string) {
	p.String("tenant", t)
	if t != "" && p.parts == 1 {
		p.scope, p.scopeEnd = t, len(p.enc.bytes())
	}
}

// Int adds a signed integer part.
func (p *KeyParts) Int(v int64) {
	var b [binary.MaxVarintLen64]byte
	n := binary.PutVarint(b[:], v)
	p.header('i', n)
	put(&p.enc, b[:n])
}

// Uint adds an unsigned integer part.
func (p *KeyParts) Uint(v uint64) {
	var b [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(b[:], v)
	p.header('u', n)
	put(&p.enc, b[:n])
}

// Bool adds a boolean part.
func (p *KeyParts) Bool(v bool) {
	p.header('b', 1)
	if v {
		put(&p.enc, []byte{1})
	} else {
		put(&p.enc, []byte{0})
	}
}

// Bytes adds a byte-array part (a UUID, say); path names it when it is all
// zero bytes or empty, which is treated as missing.
func (p *KeyParts) Bytes(path string, b []byte) {
	if len(bytes.TrimLeft(b, "\x00")) == 0 {
		p.markMissing(path)
		return
	}
	p.header('x', len(b))
	put(&p.enc, b)
}

// Stringer adds the String() form of v. A nil v, or a nil pointer in v, is
// a missing part (its String method is not called); a time.Time in v is
// added by its instant, as Time does.
func (p *KeyParts) Stringer(path string, v fmt.Stringer) {
	if p.time(path, v) {
		return
	}
	if isNil(v) {
		p.markMissing(path)
		return
	}
	p.String(path, v.String())
}

// time adds v by its instant when it is a time.Time or *time.Time (an
// interface part holding one), and reports whether it was.
func (p *KeyParts) time(path string, v any) bool {
	switch t := v.(type) {
	case time.Time:
		p.Time(path, t)
	case *time.Time:
		if t == nil {
			p.markMissing(path)
		} else {
			p.Time(path, *t)
		}
	default:
		return false
	}
	return true
}

// Text adds the MarshalText form of v; a marshalling error is returned by
// Key. A nil v, or a nil pointer in v, is a missing part; a time.Time in v
// is added by its instant, as Time does.
func (p *KeyParts) Text(path string, v encoding.TextMarshaler) {
	if p.time(path, v) {
		return
	}
	if isNil(v) {
		p.markMissing(path)
		return
	}
	b, err := v.MarshalText()
	if err != nil {
		if p.err == nil {
			p.err = fmt.Errorf("idem: key part %s: %w", path, err)
		}
		return
	}
	if len(b) == 0 {
		p.markMissing(path)
		return
	}
	p.header('s', len(b))
	put(&p.enc, b)
}

// Time adds the instant t stands for: seconds and nanoseconds since the Unix
// epoch, in fixed width. The location and the monotonic reading are not part
// of it, so the same instant read in any zone, or decoded from JSON, is the
// same key. The zero time is a missing part.
func (p *KeyParts) Time(path string, t time.Time) {
	if t.IsZero() {
		p.markMissing(path)
		return
	}
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.Unix()))
	binary.BigEndian.PutUint32(b[8:], uint32(t.Nanosecond()))
	p.header('t', len(b))
	put(&p.enc, b[:])
}

// isNil reports whether v is nil or holds a nil pointer.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// Missing records that the part at path could not be read (a nil pointer on
// the way); Key then returns ErrMissingKey naming path.
func (p *KeyParts) Missing(path string) { p.markMissing(path) }

// Key returns the record key for tenant and op, or an error wrapping
// ErrMissingKey when a part was missing or empty.
func (p *KeyParts) Key(tenant, op string) (Key, error) {
	k, err := p.id(tenant, op)
	if err != nil {
		return Key{}, err
	}
	k.Text = p.text()
	return k, nil
}

// id is Key without the readable Text, which costs an allocation that the
// executor makes only where the text can be read (see text).
func (p *KeyParts) id(tenant, op string) (Key, error) {
	if p.err != nil {
		return Key{}, p.err
	}
	if p.missing != "" {
		return Key{}, &MissingKeyError{Op: op, Path: p.missing}
	}
	enc, parts := p.enc.bytes(), p.parts
	p.promoted = tenant == "" && p.scope != ""
	if p.promoted {
		tenant, enc, parts = p.scope, enc[p.scopeEnd:], parts-1
	}
	if parts == 0 {
		return Key{}, &MissingKeyError{Op: op, Path: "(no parts)"}
	}
	var scratch [320]byte
	buf := binary.AppendUvarint(scratch[:0], uint64(len(tenant)))
	buf = append(buf, tenant...)
	buf = binary.AppendUvarint(buf, uint64(len(op)))
	buf = append(buf, op...)
	buf = append(buf, enc...)
	return Key{Tenant: tenant, Op: op, ID: sha256.Sum256(buf)}, nil
}

// text returns the readable form of the parts (Key.Text); never empty for
// parts id accepts.
func (p *KeyParts) text() string {
	if p.promoted {
		return readable(p.enc.bytes()[p.scopeEnd:])
	}
	return readable(p.enc.bytes())
}

// readable decodes the parts' encoding into "part+part+...", cut at
// MaxReadableKey bytes on a rune boundary.
func readable(enc []byte) string {
	var scratch [MaxReadableKey + 64]byte
	text := scratch[:0]
	for first := true; len(enc) > 0 && len(text) < MaxReadableKey; first = false {
		kind := enc[0]
		n, w := binary.Uvarint(enc[1:])
		b := enc[1+w : 1+w+int(n)]
		enc = enc[1+w+int(n):]
		if !first {
			text = append(text, '+')
		}
		switch kind {
		case 'i':
			v, _ := binary.Varint(b)
			text = strconv.AppendInt(text, v, 10)
		case 'u':
			v, _ := binary.Uvarint(b)
			text = strconv.AppendUint(text, v, 10)
		case 'b':
			text = strconv.AppendBool(text, b[0] == 1)
		case 'x':
			text = hex.AppendEncode(text, b)
		case 't':
			at := time.Unix(int64(binary.BigEndian.Uint64(b[:8])), int64(binary.BigEndian.Uint32(b[8:]))).UTC()
			text = at.AppendFormat(text, time.RFC3339Nano)
		default:
			text = append(text, b...)
		}
	}
	if len(text) > MaxReadableKey {
		text = text[:MaxReadableKey]
		for len(text) > 0 && !utf8.Valid(text) {
			text = text[:len(text)-1]
		}
	}
	return string(text)
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

// keyContext is the context a wrapped method runs in: its caller's, carrying
// the record key's ID. It is one allocation, where context.WithValue would
// take two (the context and the boxed ID); cancellation, deadline and every
// other value come from the caller's context.
type keyContext struct {
	context.Context
	id [32]byte

	mu   sync.Mutex
	vals map[any]any // CallScoped's values, made on first use
}

// Value returns the keyContext itself for DoorContextKey (see lookup), and
// asks the caller's context for every other key.
func (c *keyContext) Value(key any) any {
	if key == DoorContextKey {
		return c
	}
	return c.Context.Value(key)
}

// detachedKeyContext is a keyContext's caller's context without its
// cancellation: context.WithoutCancel, in the keyContext's allocation. It
// answers Value as the caller's context does (not for the key: the
// executor's store calls after the method ran get the caller's values
// alone, as before).
type detachedKeyContext keyContext

// detached returns c's caller's context without its cancellation.
func (c *keyContext) detached() context.Context { return (*detachedKeyContext)(c) }

// Deadline returns no deadline.
func (*detachedKeyContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns nil: the context is never cancelled.
func (*detachedKeyContext) Done() <-chan struct{} { return nil }

// Err returns nil.
func (*detachedKeyContext) Err() error { return nil }

// Value asks the caller's context. (context.Cause asks Err first, which
// is nil: it finds no cause either, as with context.WithoutCancel.)
func (c *detachedKeyContext) Value(key any) any { return c.Context.Value(key) }

// String names the context as context.WithoutCancel's does.
func (c *detachedKeyContext) String() string { return fmt.Sprint(c.Context) + ".WithoutCancel" }

// ContextWithKey returns ctx carrying k as the key of the idempotent call in
// progress, so that KeyFrom(ctx) returns k.Hex(). The executor calls it for
// the context a wrapped method runs in (and so for an idemhttp or idemgrpc
// handler); call it yourself where work is made idempotent by other means
// (a consumer that deduplicates by message ID, say), so that the calls it
// makes downstream through idemhttp.Transport or idemgrpc derive their keys
// from k.
func ContextWithKey(ctx context.Context, k Key) context.Context {
	return &keyContext{Context: ctx, id: k.ID}
}

// KeyFrom returns the idempotency key of the call that ctx belongs to: the
// hex form of the record key (Key.Hex), inside a wrapped method and inside an
// idemhttp or idemgrpc handler alike (see ContextWithKey). It is scoped by
// tenant and operation, unlike the raw Idempotency-Key header, so keys
// derived from it for downstream calls cannot collide across tenants. Use
// Derive on it for downstream calls.
func KeyFrom(ctx context.Context) (string, bool) {
	c := lookup(ctx, fKey).key
	if c == nil {
		return "", false
	}
	return hex.EncodeToString(c.id[:]), true
}

// CallScoped returns the value kept under key for the idempotent call ctx
// belongs to (the innermost, as KeyFrom's), making it with mk on first use;
// ok is false outside an idempotent call. Every run of a call starts with no
// values (a retry of the call runs in a fresh context), so state kept here
// restarts on each retry: a door that derives downstream keys keeps its
// per-call sequence of them here, so that two downstream calls of one call
// get different keys and a retry of the call gets the same keys again, in
// the same order. key follows context.WithValue's rules (a comparable
// unexported type). Safe for concurrent use; mk runs under a lock.
func CallScoped(ctx context.Context, key any, mk func() any) (v any, ok bool) {
	c := lookup(ctx, fKey).key
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.vals[key]; ok {
		return v, true
	}
	if c.vals == nil {
		c.vals = map[any]any{}
	}
	v = mk()
	c.vals[key] = v
	return v, true
}
