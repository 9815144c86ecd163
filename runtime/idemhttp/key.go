package idemhttp

import (
	"errors"
	"strings"
)

// Header is the name of the request header field that carries the key.
const Header = "Idempotency-Key"

// ReplayedHeader is set to "true" on every response replayed from the store.
const ReplayedHeader = "Idempotent-Replayed"

// ReplayedByHeader is set to ReplayedByBusinessKey on a response whose
// handler ran for this request's Idempotency-Key, but whose wrapped methods
// (generated wrappers, idem.Do) were answered with outcomes an earlier
// request stored under their own keys (an order's ID, say) instead of
// running: what the response reports was done before, by another request,
// possibly under another Idempotency-Key. The middleware sets it (a
// handler's own value of the field is never stored), and it is stored and
// replayed with the response; a response the handler streamed (flushed)
// has sent its header fields already, and goes without it.
const ReplayedByHeader = "Idempotent-Replayed-By"

// ReplayedByBusinessKey is the value of ReplayedByHeader: the replay was
// decided by a wrapped method's business key, not by the Idempotency-Key.
const ReplayedByBusinessKey = "business-key"

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
	// structured-field string item (RFC 9651 sections 3.3.3 and 3.1.2): an
	// unterminated string, an escape other than \" and \\, malformed
	// parameters, or other characters after the string.
	ErrKeySyntax = errors.New("idemhttp: Idempotency-Key is not a valid structured-field string")
	// ErrKeyList: the value is a list of keys (a comma outside a quoted
	// string), as when a client, or a proxy combining repeated header
	// lines, sends more than one key in one field.
	ErrKeyList = errors.New("idemhttp: Idempotency-Key is a list (a comma outside a quoted string); send exactly one key")
)

// ParseKey returns the key carried by one Idempotency-Key field value.
//
// Two forms are accepted: the draft's structured-field string
// (`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, with `\"` and `\\` as the only
// escapes), optionally followed by structured-field parameters
// (`"8e03…";v=1`), which are checked and ignored, as structured fields
// ignore parameters they do not define (the draft defines none); and a bare
// value as most deployed clients send it
// (`8e03978e-40d5-43e8-bc93-6894a57f9324`), which is taken verbatim (a
// semicolon in it is part of the key). Surrounding spaces and tabs are
// ignored. The key, after unquoting, must be 1 to 255 printable ASCII
// characters (0x20 to 0x7E). A value that starts with a double quote is
// always read as a structured-field string, so it must be a valid one.
// "abc" and abc are the same key.
//
// A list is refused (ErrKeyList): a bare value with a comma, or a comma
// after the string (`"a", "b"`). HTTP lets a recipient combine repeated
// header lines into one comma-separated line, so `key-1, key-2` may be two
// keys; taking it as one would be a guess. A comma inside a quoted string
// (`"a,b"`) is part of the key.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", ErrKeyEmpty
	}
	if v[0] != '"' {
		if strings.IndexByte(v, ',') >= 0 {
			return "", ErrKeyList
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e {
				return "", ErrKeyCharset
			}
		}
		if len(v) > MaxKeyLen {
			return "", ErrKeyTooLong
		}
		return v, nil
	}
	k, rest, err := parseString(v)
	if err != nil {
		return "", err
	}
	if rest, err = skipParameters(rest); err != nil {
		return "", err
	}
	if rest = strings.TrimLeft(rest, " \t"); rest != "" {
		if rest[0] == ',' {
			return "", ErrKeyList
		}
		return "", ErrKeySyntax
	}
	if k == "" {
		return "", ErrKeyEmpty
	}
	if len(k) > MaxKeyLen {
		return "", ErrKeyTooLong
	}
	return k, nil
}

// parseString reads the structured-field string at the start of v (which
// starts with a double quote) and returns it unescaped and what follows it:
// DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE.
func parseString(v string) (s, rest string, err error) {
	var b []byte // allocated only when there is an escape
	start := 1
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			if i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", "", ErrKeySyntax
			}
			if b == nil {
				b = make([]byte, 0, len(v))
			}
			b = append(b, v[start:i]...)
			i++
			start = i
		case c == '"':
			if b == nil {
				return v[1:i], v[i+1:], nil
			}
			return string(append(b, v[start:i]...)), v[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", ErrKeyCharset
		}
	}
	return "", "", ErrKeySyntax // no closing quote
}

// skipParameters reads the structured-field parameters at the start of v
// and returns what follows them (RFC 9651 section 3.1.2):
// *( ";" *SP key [ "=" bare-item ] ).
func skipParameters(v string) (string, error) {
	for len(v) > 0 && v[0] == ';' {
		v = strings.TrimLeft(v[1:], " ")
		n := 0
		for n < len(v) && (isLCAlpha(v[n]) || v[n] == '*' || n > 0 && (isDigit(v[n]) || strings.IndexByte("_-.", v[n]) >= 0)) {
			n++
		}
		if n == 0 {
			return "", ErrKeySyntax
		}
		v = v[n:]
		if len(v) > 0 && v[0] == '=' {
			var err error
			if v, err = skipBareItem(v[1:]); err != nil {
				return "", err
			}
		}
	}
	return v, nil
}

// skipBareItem reads one structured-field bare item (an integer, decimal,
// string, token, byte sequence, boolean, date or display string) at the
// start of v and returns what follows it.
func skipBareItem(v string) (string, error) {
	if v == "" {
		return "", ErrKeySyntax
	}
	switch c := v[0]; {
	case c == '"':
		_, rest, err := parseString(v)
		return rest, err
	case c == '-' || isDigit(c):
		return skipNumber(v)
	case c == '@':
		return skipNumber(v[1:])
	case c == '?':
		if len(v) < 2 || (v[1] != '0' && v[1] != '1') {
			return "", ErrKeySyntax
		}
		return v[2:], nil
	case c == ':':
		end := strings.IndexByte(v[1:], ':')
		if end < 0 {
			return "", ErrKeySyntax
		}
		for i := 1; i <= end; i++ {
			if c := v[i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
				return "", ErrKeySyntax
			}
		}
		return v[end+2:], nil
	case c == '%':
		if len(v) < 2 || v[1] != '"' {
			return "", ErrKeySyntax
		}
		for i := 2; i < len(v); i++ {
			switch c := v[i]; {
			case c == '"':
				return v[i+1:], nil
			case c == '%':
				if i+2 >= len(v) || !isLCHex(v[i+1]) || !isLCHex(v[i+2]) {
					return "", ErrKeySyntax
				}
				i += 2
			case c < 0x20 || c > 0x7e:
				return "", ErrKeySyntax
			}
		}
		return "", ErrKeySyntax
	case isAlpha(c) || c == '*':
		n := 1
		for n < len(v) && (isTChar(v[n]) || v[n] == ':' || v[n] == '/') {
			n++
		}
		return v[n:], nil
	}
	return "", ErrKeySyntax
}

// skipNumber reads an sf-integer (at most 15 digits) or an sf-decimal (at
// most 12 digits, a dot, 1 to 3 digits).
func skipNumber(v string) (string, error) {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	start := i
	for i < len(v) && isDigit(v[i]) {
		i++
	}
	whole := i - start
	if whole == 0 || whole > 15 {
		return "", ErrKeySyntax
	}
	if i < len(v) && v[i] == '.' {
		i++
		fracStart := i
		for i < len(v) && isDigit(v[i]) {
			i++
		}
		if frac := i - fracStart; whole > 12 || frac == 0 || frac > 3 {
			return "", ErrKeySyntax
		}
	}
	return v[i:], nil
}

func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }
func isLCHex(c byte) bool   { return isDigit(c) || c >= 'a' && c <= 'f' }

// isTChar reports whether c is a tchar of RFC 9110 section 5.6.2.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || c < 0x80 && strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
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
