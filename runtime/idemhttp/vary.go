package idemhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// selectedBy returns the request header fields that selected the response
// whose header is resp, with req's values (see fieldValue): the fields named
// by the response's Vary ("*" cannot be checked and is left out, and the
// Idempotency-Key is the same on every retry), and
// Accept-Encoding when the response has a Content-Encoding. A field the
// request lacked is present with no values. nil when there are none.
func selectedBy(resp, req http.Header) http.Header {
	var sel http.Header
	add := func(name string) {
		if sel == nil {
			sel = make(http.Header, 2)
		}
		if _, done := sel[name]; !done {
			sel[name] = fieldValue(name, req.Values(name))
		}
	}
	for _, name := range listElements(resp.Values("Vary")) {
		// The key itself is the same on every retry, whatever its form.
		if name = http.CanonicalHeaderKey(name); name != "*" && name != Header && isToken(name) {
			add(name)
		}
	}
	if len(contentCodings(resp.Values("Content-Encoding"))) > 0 {
		add("Accept-Encoding")
	}
	return sel
}

// notAcceptable reports whether the stored response must not be replayed
// to a request with header req, and the field that says so: a field that
// selected the stored representation (see selectedBy) whose value in req
// differs from the first request's, except an Accept-Encoding that accepts
// the stored Content-Encoding.
func notAcceptable(resp response, req http.Header) (field string, refused bool) {
	names := make([]string, 0, len(resp.Selected))
	for name := range resp.Selected {
		names = append(names, name)
	}
	slices.Sort(names) // the same field named every time
	for _, name := range names {
		retry := req.Values(name)
		if slices.Equal(resp.Selected[name], fieldValue(name, retry)) {
			continue
		}
		if name == "Accept-Encoding" && acceptsEncoding(retry, resp.Header.Values("Content-Encoding")) {
			continue
		}
		return name, true
	}
	return "", false
}

// fieldValue is the form in which a request field's value is kept with the
// response and compared: its list elements, or for a credential (a Vary on
// Authorization or Cookie) their SHA-256, so that no credential is stored.
func fieldValue(name string, lines []string) []string {
	elems := listElements(lines)
	if elems == nil || !neverStored[name] {
		return elems
	}
	sum := sha256.Sum256([]byte(strings.Join(elems, ", ")))
	return []string{"sha256:" + hex.EncodeToString(sum[:])}
}

// listElements splits the lines of a comma-separated field into its
// elements, without surrounding whitespace and empty elements.
func listElements(lines []string) []string {
	var out []string
	for _, line := range lines {
		for e := range strings.SplitSeq(line, ",") {
			if e = strings.Trim(e, " \t"); e != "" {
				out = append(out, e)
			}
		}
	}
	return out
}

// contentCodings returns the content codings of a Content-Encoding field,
// in lower case, without "identity" (which is no coding).
func contentCodings(lines []string) []string {
	var out []string
	for _, c := range listElements(lines) {
		if c = strings.ToLower(c); c != "identity" {
			out = append(out, c)
		}
	}
	return out
}

// acceptsEncoding reports whether a request with the Accept-Encoding field
// ae accepts a response with the Content-Encoding field ce (RFC 9110 section
// 12.5.3): every coding applied must be acceptable, by name (x-gzip is gzip,
// x-compress is compress) or by "*", with a weight above 0; a response
// without a coding is acceptable unless identity is refused. A request with
// no Accept-Encoding accepts no coding: RFC 9110 lets a server send any
// coding then, but clients that send none (curl without --compressed, a Go
// client with its own Accept-Encoding handling) cannot decode one.
func acceptsEncoding(ae, ce []string) bool {
	codings := contentCodings(ce)
	if len(ae) == 0 {
		return len(codings) == 0
	}
	weights := map[string]float64{}
	for _, e := range listElements(ae) {
		name, params, _ := strings.Cut(e, ";")
		name = strings.ToLower(strings.Trim(name, " \t"))
		switch name {
		case "x-gzip":
			name = "gzip"
		case "x-compress":
			name = "compress"
		}
		weights[name] = weight(params)
	}
	accepts := func(name string) bool {
		if q, ok := weights[name]; ok {
			return q > 0
		}
		if q, ok := weights["*"]; ok {
			return q > 0
		}
		return name == "identity" // acceptable unless refused by name or by "*;q=0"
	}
	if len(codings) == 0 {
		return accepts("identity")
	}
	for _, c := range codings {
		switch c {
		case "x-gzip":
			c = "gzip"
		case "x-compress":
			c = "compress"
		}
		if !accepts(c) {
			return false
		}
	}
	return true
}

// weight returns the q parameter among an element's parameters (1 when
// absent; 0, refusing, when malformed).
func weight(params string) float64 {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(strings.Trim(p, " \t"), "=")
		if strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || q < 0 || q > 1 {
				return 0
			}
			return q
		}
	}
	return 1
}
