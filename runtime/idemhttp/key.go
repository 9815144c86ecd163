package idemhttp

import (
	"errors"
	"strings"
)

// Header is the name of the request header field that carries the key.
const Header = "Idempotency-Key"

// ReplayedHeader is set to "true" on every response replayed from the store.
const ReplayedHeader = "Idempotent-Replayed"

// MaxKeyLen is the longest key accepted, in bytes (characters: a key is ASCII).
const MaxKeyLen = 255

// Errors returned by ParseKey. The middleware answers each with 400.
var (
	// ErrKeyEmpty: the header is present but the key is empty.
	ErrKeyEmpty = errors.New("idemhttp: Idempotency-Key is empty")
	// ErrKeyTooLong: the key has more than MaxKeyLen characters.
	ErrKeyTooLong = errors.New("idemhttp: Idempotency-Key is longer than 255 characters")
	// ErrKeyCharset: the key has a character outside printable ASCII.
	ErrKeyCharset = errors.New("idemhttp: Idempotency-Key has a character outside printable ASCII")
	// ErrKeySyntax: the value starts with a double quote but is not a valid
	// structured-field string (RFC 8941 section 3.3.3).
	ErrKeySyntax = errors.New("idemhttp: Idempotency-Key is not a valid structured-field string")
)

// ParseKey returns the key carried by one Idempotency-Key field value.
//
// Two forms are accepted: the draft's structured-field string
// (`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, with `\"` and `\\` as the only
// escapes) and a bare value as most deployed clients send it
// (`8e03978e-40d5-43e8-bc93-6894a57f9324`). Surrounding spaces and tabs are
// ignored. The key, after unquoting, must be 1 to 255 printable ASCII
// characters (0x20 to 0x7E). A value that starts with a double quote is
// always read as a structured-field string, so it must be a valid one; a
// bare value is taken as it is. "abc" and abc are the same key.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", ErrKeyEmpty
	}
	if v[0] != '"' {
		if len(v) > MaxKeyLen {
			return "", ErrKeyTooLong
		}
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < 0x20 || c > 0x7e {
				return "", ErrKeyCharset
			}
		}
		return v, nil
	}
	// Structured-field string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE
	var b []byte // allocated only when there is an escape
	start := 1
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			if i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", ErrKeySyntax
			}
			if b == nil {
				b = make([]byte, 0, len(v))
			}
			b = append(b, v[start:i]...)
			i++
			start = i
		case c == '"':
			if i != len(v)-1 {
				return "", ErrKeySyntax
			}
			var k string
			if b == nil {
				k = v[1:i]
			} else {
				k = string(append(b, v[start:i]...))
			}
			if k == "" {
				return "", ErrKeyEmpty
			}
			if len(k) > MaxKeyLen {
				return "", ErrKeyTooLong
			}
			return k, nil
		case c < 0x20 || c > 0x7e:
			return "", ErrKeyCharset
		}
	}
	return "", ErrKeySyntax // no closing quote
}

// FormatKey returns key as a structured-field string, the draft's form of
// the header value: FormatKey(`a"b`) is `"a\"b"`. ParseKey(FormatKey(k))
// is k for every valid key.
func FormatKey(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if c := key[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}
