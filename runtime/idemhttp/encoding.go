package idemhttp

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The stored response is the result of idem.Do, encoded by the executor's
// codec. With the default codec (idem.JSONCodec) it is JSON, written and
// read by the two methods below instead of by reflection: the bytes are
// those encoding/json writes for the struct (the same fields, map keys in
// sorted order, []byte as standard base64), so records stored before these
// methods existed, and by a process that does not have them, read the same.
// A replay decodes one record per request, and reflection over the header
// maps was most of a replay's time and allocations (see
// docs/decisions/http-replay.md). Other codecs encode the struct's fields.

// plainResponse is response without its methods: what encoding/json makes of
// it, the fallback of UnmarshalJSON.
type plainResponse response

// errNotUTF8 refuses a header field name or value that JSON cannot carry
// unaltered, as idem.JSONCodec refuses such a string.
var errNotUTF8 = errors.New("idemhttp: a stored header field is not valid UTF-8")

// MarshalJSON encodes the response as encoding/json encodes its fields.
func (r response) MarshalJSON() ([]byte, error) { return r.MarshalJSONValue() }

// MarshalJSONValue is MarshalJSON for idem.JSONValueMarshaler: its bytes
// are already those json.Marshal returns for the response (compact, HTML
// characters escaped as encoding/json escapes them; TestResponseJSON
// compares them), so the executor's JSONCodec stores them as they are.
func (r response) MarshalJSONValue() ([]byte, error) {
	n := 64 + base64.StdEncoding.EncodedLen(len(r.Body)) + headerLen(r.Header) + headerLen(r.Selected)
	b := make([]byte, 0, n)
	b = append(b, `{"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	var err error
	if len(r.Header) > 0 {
		b = append(b, `,"header":`...)
		if b, err = appendHeader(b, r.Header); err != nil {
			return nil, err
		}
	}
	if len(r.Body) > 0 {
		b = append(b, `,"body":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.Body)
		b = append(b, '"')
	}
	if len(r.Selected) > 0 {
		b = append(b, `,"selected":`...)
		if b, err = appendHeader(b, r.Selected); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// headerLen estimates the encoded length of h.
func headerLen(h http.Header) int {
	n := 2
	for k, vs := range h {
		n += len(k) + 6
		for _, v := range vs {
			n += len(v) + 3
		}
	}
	return n
}

// appendHeader appends h as a JSON object, keys sorted, as encoding/json
// encodes a map; a nil value is null.
func appendHeader(b []byte, h http.Header) ([]byte, error) {
	var small [16]string
	keys := small[:0]
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	var err error
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendString(b, k); err != nil {
			return nil, err
		}
		b = append(b, ':')
		vs := h[k]
		if vs == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '[')
		for j, v := range vs {
			if j > 0 {
				b = append(b, ',')
			}
			if b, err = appendString(b, v); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// appendString appends s as a JSON string. Printable ASCII other than the
// double quote, the backslash and the characters encoding/json escapes for
// HTML (<, >, &) is copied; a string with any other byte is encoded by
// encoding/json, once it is known to be valid UTF-8 (which encoding/json
// would silently replace).
func appendString(b []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			if !utf8.ValidString(s) {
				return nil, errNotUTF8
			}
			q, err := json.Marshal(s)
			if err != nil {
				return nil, err
			}
			return append(b, q...), nil
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}

// UnmarshalJSON decodes what MarshalJSON (or encoding/json) wrote. The
// common form, the one MarshalJSON writes with strings without escapes, is
// read directly; anything else is left to encoding/json.
func (r *response) UnmarshalJSON(data []byte) error {
	return r.UnmarshalJSONValue(data)
}

// UnmarshalJSONValue is UnmarshalJSON for data that encoding/json has not
// checked (idem.JSONValueUnmarshaler: the executor's JSONCodec calls it
// without a scan of its own). The form read directly is valid JSON, and
// responseDecoder accepts nothing else; every other input, valid or not,
// is encoding/json's to decode or refuse.
func (r *response) UnmarshalJSONValue(data []byte) error {
	d := responseDecoder{b: data, s: string(data)}
	if d.response(r) {
		return nil
	}
	*r = response{}
	return json.Unmarshal(data, (*plainResponse)(r))
}

// responseDecoder reads the JSON of a response. It accepts only the form
// MarshalJSON writes (no whitespace, strings without escapes or control
// characters, the status a JSON integer without sign or leading zero,
// nothing after the object), which is valid JSON, and gives up (false) on
// anything else. Strings are slices of s: one allocation for all of them.
type responseDecoder struct {
	b    []byte // the input
	s    string // the input, as a string
	i    int
	vals []string // the arena the header values are cut from
}

func (d *responseDecoder) response(r *response) bool {
	if !d.byte('{') {
		return false
	}
	for first := true; ; first = false {
		if d.byte('}') {
			return d.i == len(d.s)
		}
		if !first && !d.byte(',') {
			return false
		}
		name, ok := d.string()
		if !ok || !d.byte(':') {
			return false
		}
		switch name {
		case "status":
			start := d.i
			for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
				d.i++
			}
			if d.i-start > 1 && d.s[start] == '0' {
				return false // a leading zero: not JSON
			}
			n, err := strconv.Atoi(d.s[start:d.i])
			if err != nil {
				return false
			}
			r.Status = n
		case "header":
			if r.Header, ok = d.header(); !ok {
				return false
			}
		case "selected":
			if r.Selected, ok = d.header(); !ok {
				return false
			}
		case "body":
			start := d.i + 1
			if _, ok := d.string(); !ok {
				return false
			}
			body, err := base64.StdEncoding.AppendDecode(nil, d.b[start:d.i-1])
			if err != nil {
				return false
			}
			r.Body = body
		default:
			return false
		}
	}
}

// header reads an object of string arrays (or null values).
func (d *responseDecoder) header() (http.Header, bool) {
	if !d.byte('{') {
		return nil, false
	}
	h := make(http.Header, 4)
	for first := true; ; first = false {
		if d.byte('}') {
			return h, true
		}
		if !first && !d.byte(',') {
			return nil, false
		}
		k, ok := d.string()
		if !ok || !d.byte(':') {
			return nil, false
		}
		if d.literal("null") {
			h[k] = nil
			continue
		}
		if !d.byte('[') {
			return nil, false
		}
		start := len(d.vals)
		for j := 0; !d.byte(']'); j++ {
			if j > 0 && !d.byte(',') {
				return nil, false
			}
			v, ok := d.string()
			if !ok {
				return nil, false
			}
			if d.vals == nil {
				d.vals = make([]string, 0, 8)
			}
			d.vals = append(d.vals, v)
		}
		if start == len(d.vals) {
			h[k] = []string{} // as encoding/json reads [] (no allocation)
			continue
		}
		h[k] = d.vals[start:len(d.vals):len(d.vals)]
	}
}

// string reads a JSON string without escapes.
func (d *responseDecoder) string() (string, bool) {
	if !d.byte('"') {
		return "", false
	}
	start := d.i
	for d.i < len(d.s) && plainJSON[d.s[d.i]] {
		d.i++
	}
	if d.i < len(d.s) && d.s[d.i] == '"' {
		d.i++
		return d.s[start : d.i-1], true
	}
	return "", false // an escape, a control character or no end
}

// plainJSON holds the bytes a JSON string holds as they are: all but the
// double quote, the backslash and the control characters.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (d *responseDecoder) byte(c byte) bool {
	if d.i < len(d.s) && d.s[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *responseDecoder) literal(lit string) bool {
	if len(d.s)-d.i >= len(lit) && d.s[d.i:d.i+len(lit)] == lit {
		d.i += len(lit)
		return true
	}
	return false
}
