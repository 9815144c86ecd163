package idemhttp

import (
	"bufio"
	"bytes"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// recorder is the ResponseWriter the handler sees. It buffers the response
// (so that nothing reaches the client before the outcome is decided and, on
// a transactional store, committed) and keeps a copy for storage.
//
// It streams instead when the handler flushes, or when the response outgrows
// the storage limit: the status, headers and buffered bytes go to the client
// and every later write passes through, still copied while within the limit.
type recorder struct {
	w      http.ResponseWriter
	header http.Header // what the handler sees and edits
	limit  int

	status   int         // final status, 0 until WriteHeader or first Write
	snapshot http.Header // header as of WriteHeader (what was sent)
	body     bytes.Buffer

	streaming bool // status and headers went to w; writes pass through
	overflow  bool // the body outgrew limit: not storable
	hijacked  bool
	unknown   bool // OutcomeUnknown: not stored, not released
	// notStoredSent: NotStoredHeader went out with the headers.
	notStoredSent bool
}

// NotStoredHeader is set on the response of a request whose handler ran
// but whose response was not stored, and whose key is not released:
// "too-large" (the body exceeded WithMaxResponse) or "outcome-unknown"
// (OutcomeUnknown). A retry with the key gets 500 response-not-replayable,
// not a second run. It is a header field when the response had not been
// sent yet when that was known, else a trailer (on a chunked response; a
// response whose handler set Content-Length cannot carry it).
const NotStoredHeader = "Idempotent-Not-Stored"

// notStored marks the response as not stored, for why: a header field
// when nothing was sent yet, else a trailer.
func (r *recorder) notStored(why string) {
	if r.hijacked {
		return
	}
	if !r.streaming {
		r.snapshot.Set(NotStoredHeader, why)
		return
	}
	if r.notStoredSent {
		return
	}
	r.header.Set(http.TrailerPrefix+NotStoredHeader, why) // copied by sendTrailers
}

func newRecorder(w http.ResponseWriter, limit int) *recorder {
	return &recorder{w: w, header: w.Header().Clone(), limit: limit}
}

// Header returns the header map the handler edits.
func (r *recorder) Header() http.Header { return r.header }

// WriteHeader records the status. Informational (1xx) statuses other than
// 101 go to the client at once and are not stored.
func (r *recorder) WriteHeader(code int) {
	if r.status != 0 || r.hijacked {
		return // superfluous, as net/http ignores it
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		h := r.w.Header()
		clear(h)
		maps.Copy(h, r.header)
		r.w.WriteHeader(code)
		return
	}
	if code < 100 || code > 999 {
		// net/http panics on an invalid code; keep that behaviour.
		panic("idemhttp: invalid WriteHeader code " + strconv.Itoa(code))
	}
	r.status = code
	r.snapshot = r.header.Clone()
}

// Write buffers p, or passes it through once streaming.
func (r *recorder) Write(p []byte) (int, error) {
	if r.hijacked {
		return 0, http.ErrHijacked
	}
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.overflow {
		if r.body.Len()+len(p) > r.limit {
			r.overflow = true
			if !r.streaming {
				// Not storable, known before anything is sent: say so in
				// the header.
				r.snapshot.Set(NotStoredHeader, "too-large")
				r.notStoredSent = true
				r.startStreaming()
			}
			r.body = bytes.Buffer{} // not storable: stop holding it
		} else {
			r.body.Write(p)
			if !r.streaming {
				return len(p), nil
			}
		}
	}
	_, _ = r.w.Write(p)
	// A client that went away does not fail the handler's writes: a handler
	// that stopped at the error would leave a truncated body to be stored
	// and replayed as if complete. The whole response is stored instead.
	return len(p), nil
}

// WriteString is Write for strings.
func (r *recorder) WriteString(s string) (int, error) { return r.Write([]byte(s)) }

// Flush switches to streaming and flushes what the handler wrote so far.
func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError is Flush for http.ResponseController, which reports errors.
func (r *recorder) FlushError() error {
	if r.hijacked {
		return http.ErrHijacked
	}
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.streaming {
		r.startStreaming()
	}
	return http.NewResponseController(r.w).Flush()
}

// Hijack hands the connection over; the response is then not stored.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(r.w).Hijack()
	if err == nil {
		r.hijacked = true
	}
	return c, rw, err
}

// Unwrap returns the client's ResponseWriter, for http.ResponseController
// (deadlines, full duplex).
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

// finish settles the response after the handler returned: the implicit 200
// of a handler that wrote nothing, and the sniffed Content-Type net/http
// would add, so that the stored copy is what the client got.
func (r *recorder) finish() {
	if r.hijacked {
		return
	}
	if r.status == 0 {
		r.status = http.StatusOK
		r.snapshot = r.header.Clone()
	}
	if _, set := r.snapshot["Content-Type"]; !set && r.body.Len() > 0 && !r.streaming && bodyAllowed(r.status) {
		r.snapshot.Set("Content-Type", http.DetectContentType(r.body.Bytes()))
	}
}

// startStreaming sends the status, the headers and the buffered body.
func (r *recorder) startStreaming() {
	r.streaming = true
	h := r.w.Header()
	clear(h)
	maps.Copy(h, r.snapshot)
	r.w.WriteHeader(r.status)
	if r.body.Len() > 0 {
		_, _ = r.w.Write(r.body.Bytes())
	}
}

// send writes the buffered response to the client after the outcome was
// decided; when streaming, only the trailers are left.
func (r *recorder) send() {
	if r.hijacked {
		return
	}
	if !r.streaming {
		h := r.w.Header()
		clear(h)
		maps.Copy(h, r.snapshot)
		if _, set := h["Content-Length"]; !set && bodyAllowed(r.status) && !r.hasTrailers() {
			h["Content-Length"] = []string{strconv.Itoa(r.body.Len())}
		}
		r.w.WriteHeader(r.status)
		if r.body.Len() > 0 && bodyAllowed(r.status) {
			_, _ = r.w.Write(r.body.Bytes())
		}
	}
	r.sendTrailers()
}

// sendTrailers copies the trailer values the handler set after writing, as
// net/http would have sent them. Trailers are not stored.
func (r *recorder) sendTrailers() {
	h := r.w.Header()
	for _, decl := range r.snapshot["Trailer"] {
		for name := range strings.SplitSeq(decl, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if v, ok := r.header[name]; ok {
				h[name] = v
			}
		}
	}
	for k, v := range r.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			h[k] = v
		}
	}
}

// hasTrailers reports whether the handler declared trailers, which need a
// chunked body (no Content-Length).
func (r *recorder) hasTrailers() bool {
	if len(r.snapshot["Trailer"]) > 0 {
		return true
	}
	for k := range r.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
