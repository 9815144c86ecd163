package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idem"
)

// DerivedKeyHeader is set to "true" on every response to a request whose
// key the middleware derived from the request itself (WithDerivedKey),
// because the client sent no Idempotency-Key: the first response, its
// replays and the problem details alike.
const DerivedKeyHeader = "Idempotency-Key-Derived"

// MaxDerivedKeyWindow is the longest window WithDerivedKey accepts: one
// minute. A derived key cannot tell a retry from a second, legitimate
// request with the same body (the same order placed twice on purpose), so
// every identical request inside the window gets the first one's answer.
// A client's retry of a lost response comes within its timeout plus a
// backoff, seconds to tens of seconds; an identical request later than a
// minute is more likely a new intent than a retry, and merging it would
// lose it.
const MaxDerivedKeyWindow = time.Minute

// derivedPart names the key part of a derived key: a client's key is added
// under Header, so a client can never send a key that equals a derived one.
const derivedPart = "Idempotency-Key (derived)"

// WithDerivedKey is a fallback, off by default, for old clients that cannot
// be changed to send an Idempotency-Key: a request without one gets a key
// derived from a fingerprint of the request (its tenant and operation, as
// every key is scoped, and its method, escaped path, query with its
// parameters sorted by name, media type, and body, JSON bodies canonicalized:
// members sorted, insignificant whitespace dropped, escapes resolved). Every
// response to such a request carries "Idempotency-Key-Derived: true"
// (DerivedKeyHeader).
//
// The derived key deduplicates identical requests from the first one's claim
// until window after its response is stored; then it expires and an
// identical request runs again. window must be positive and at most
// MaxDerivedKeyWindow. The claim's lease is capped at the window (the
// executor caps a lease at the TTL), so a handler that may run longer than
// the window needs lease renewal (idem.WithRenewal) to keep its claim.
//
// Two callers never share a derived key: with WithTenant the tenant scopes
// it, as every key; with SingleTenant the caller's credentials are part of
// it (every value of the Authorization, Proxy-Authorization and Cookie
// header fields), so identical requests from two users are two requests.
// Callers without credentials under SingleTenant are one caller.
//
// The risk, which is why this is a fallback only: two legitimate identical
// requests inside the window (the same payment made twice on purpose) get
// one answer, and the second is not processed. A request with a key is
// handled as without this option (the key wins, its TTL applies), and
// WithOptionalKey cannot be combined with it.
func WithDerivedKey(window time.Duration) Option {
	return func(c *config) {
		if window <= 0 || window > MaxDerivedKeyWindow {
			c.invalid("WithDerivedKey(%v): the window must be > 0 and at most %v (MaxDerivedKeyWindow): "+
				"every identical request inside it gets the first one's answer, so it must cover a retry, not a new intent", window, MaxDerivedKeyWindow)
			return
		}
		c.window = window
	}
}

// callerFields are the request header fields that identify the caller
// when no tenant does: a derived key without a tenant includes them, so
// that two callers with different credentials never share one.
var callerFields = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// derivedFingerprint adds what identifies a keyless request to h: the
// method, the escaped path, the canonical query, the media type and the
// canonical body; and, when identify is set (no tenant scopes the key:
// SingleTenant), the caller's credentials, every value of callerFields.
func derivedFingerprint(r *http.Request, body []byte, h *idem.Hasher, identify bool) {
	if identify {
		h.String("derived-v1+caller")
		for _, f := range callerFields {
			vs := r.Header.Values(f)
			h.Int(int64(len(vs)))
			for _, v := range vs {
				h.String(v)
			}
		}
	} else {
		h.String("derived-v1")
	}
	h.String(r.Method)
	h.String(r.URL.EscapedPath())
	h.String(canonicalQuery(r.URL.RawQuery))
	media, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		media = strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Type")))
	}
	h.String(media)
	if media == "application/json" || strings.HasSuffix(media, "+json") {
		if c, ok := canonicalJSON(body); ok {
			h.Bool(true)
			h.Bytes(c)
			return
		}
	}
	h.Bool(false)
	h.Bytes(body)
}

// canonicalQuery sorts the query's parameters by name (each name's values
// keep their order), or returns it unchanged when it does not parse.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return raw
	}
	return q.Encode()
}

// maxJSONDepth bounds the nesting canonicalJSON follows; a deeper body is
// fingerprinted byte for byte.
const maxJSONDepth = 512

var errDuplicateMember = errors.New("duplicate object member")

// canonicalJSON returns body as one JSON value with object members sorted
// by name, no insignificant whitespace, strings re-escaped and numbers as
// written; ok is false when body is not exactly one valid JSON value in
// valid UTF-8, or has an object with a member named twice (whose meaning
// depends on the reader), so that such bodies are compared byte for byte.
func canonicalJSON(body []byte) ([]byte, bool) {
	if !utf8.Valid(body) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := canonicalValue(dec, &buf, 0); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return buf.Bytes(), true
}

func canonicalValue(dec *json.Decoder, buf *bytes.Buffer, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := canonicalValue(dec, buf, depth+1); err != nil {
					return err
				}
			}
			buf.WriteByte(']')
			_, err := dec.Token()
			return err
		}
		type member struct {
			name  string
			value []byte
		}
		var members []member
		for dec.More() {
			nt, err := dec.Token()
			if err != nil {
				return err
			}
			name, _ := nt.(string)
			var v bytes.Buffer
			if err := canonicalValue(dec, &v, depth+1); err != nil {
				return err
			}
			members = append(members, member{name, v.Bytes()})
		}
		if _, err := dec.Token(); err != nil {
			return err
		}
		slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.name, b.name) })
		buf.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				if members[i-1].name == m.name {
					return errDuplicateMember
				}
				buf.WriteByte(',')
			}
			writeJSONString(buf, m.name)
			buf.WriteByte(':')
			buf.Write(m.value)
		}
		buf.WriteByte('}')
	case string:
		writeJSONString(buf, t)
	case json.Number:
		buf.WriteString(t.String())
	case bool:
		if t {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case nil:
		buf.WriteString("null")
	}
	return nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a valid UTF-8 string always marshals
	buf.Write(b)
}
