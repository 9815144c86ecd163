package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"path"
	"strings"
	"sync/atomic"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// writerKey carries the client's ResponseWriter to the proxy's
// ModifyResponse, which cannot see it otherwise.
type writerKey struct{}

// routeKey carries the operation of a keyed request: its route.
type routeKey struct{}

// newProxy builds the reverse proxy to -upstream: its transport never
// resends a request on its own (idemhttp.SendOnce), the Expect header is
// not forwarded (the gateway has read the whole body already), and a
// failure is answered by what the backend can have done (see
// errorHandler).
func newProxy(c *config, log *slog.Logger) *httputil.ReverseProxy {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.ResponseHeaderTimeout = c.upstreamTimeout
	tr := &sentTracker{next: idemhttp.NewSendOnce(base)}
	keep := c.unknownOutcome == "keep"
	return &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(c.upstream)
			pr.SetXForwarded()
			// The gateway holds the whole body: an upstream's 417 to an
			// Expect the client sent would be stored and replayed to
			// retries that sent none.
			pr.Out.Header.Del("Expect")
		},
		ModifyResponse: func(res *http.Response) error {
			if w, ok := res.Request.Context().Value(writerKey{}).(http.ResponseWriter); ok && keep {
				res.Body = &unknownOnError{ReadCloser: res.Body, w: w}
			}
			return nil
		},
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler: errorHandler(keep, log),
	}
}

// errorHandler answers a request the backend did not answer: 502
// upstream-unreachable when the request never reached it (the key is
// released: the retry is safe); 504 upstream-timeout or 502
// upstream-failed when it did, and its outcome is unknown: with keep, the
// key stays decided (idemhttp.OutcomeUnknown) and retries are refused, so
// the backend never runs twice.
func errorHandler(keep bool, log *slog.Logger) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		var ns *notSentError
		switch {
		case errors.As(err, &ns):
			log.Warn("upstream unreachable", "method", r.Method, "path", r.URL.Path, "err", err)
			writeProblem(w, http.StatusBadGateway, "upstream-unreachable", "Upstream unreachable",
				"The gateway could not send the request to the backend, which did not receive it. Retry with the same Idempotency-Key.")
			return
		}
		unknown := keep && idemhttp.OutcomeUnknown(w)
		next := "The backend received the request and may have processed it. Retry with the same Idempotency-Key."
		if unknown {
			next = "The backend received the request and may have processed it, so it will not be sent again with this Idempotency-Key: retries are refused. Look the result up at the backend."
		}
		if errors.Is(err, context.DeadlineExceeded) {
			log.Warn("upstream timed out", "method", r.Method, "path", r.URL.Path, "err", err, "outcome_kept", unknown)
			writeProblem(w, http.StatusGatewayTimeout, "upstream-timeout", "Upstream timed out",
				"The backend did not answer within the gateway's -upstream-timeout. "+next)
			return
		}
		log.Warn("upstream failed", "method", r.Method, "path", r.URL.Path, "err", err, "outcome_kept", unknown)
		writeProblem(w, http.StatusBadGateway, "upstream-failed", "Upstream failed",
			"The gateway could not get the backend's response. "+next)
	}
}

// unknownOnError marks the request's outcome unknown when the backend's
// response body breaks before its end: the proxy then aborts the client's
// response, and the key stays decided.
type unknownOnError struct {
	io.ReadCloser
	w http.ResponseWriter
}

func (u *unknownOnError) Read(p []byte) (int, error) {
	n, err := u.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		idemhttp.OutcomeUnknown(u.w)
	}
	return n, err
}

// sentTracker tells, for a request that failed, whether any of it reached
// the backend: a failure before its headers were written is a
// *notSentError.
type sentTracker struct{ next http.RoundTripper }

// notSentError: the request failed before the backend received it.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

func (s *sentTracker) RoundTrip(req *http.Request) (*http.Response, error) {
	var wrote atomic.Bool
	ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteHeaderField: func(string, []string) { wrote.Store(true) }, // conservative: a part of it left
		WroteHeaders:     func() { wrote.Store(true) },
	})
	res, err := s.next.RoundTrip(req.WithContext(ctx))
	if err != nil && !wrote.Load() {
		return nil, &notSentError{err: err}
	}
	return res, err
}

// routeMatcher finds the route of -routes a request belongs to, ignoring
// case, repeated slashes and a trailing slash in its path: /CHARGES,
// /charges/ and //charges are POST /charges, which a backend that ignores
// case or a trailing slash processes as such.
type routeMatcher struct {
	mux      *http.ServeMux
	original map[string]string // lowered pattern → the pattern as given
}

// newRouteMatcher builds the matcher of patterns; own are the gateway's
// own endpoints, which no route may take (they match no route).
func newRouteMatcher(patterns, own []string) (*routeMatcher, error) {
	m := &routeMatcher{mux: http.NewServeMux(), original: map[string]string{}}
	for _, p := range own {
		if err := handle(m.mux, p, http.NotFoundHandler()); err != nil {
			return nil, err
		}
	}
	for _, p := range patterns {
		low := lowerPattern(p)
		if prev, dup := m.original[low]; dup {
			return nil, fmt.Errorf("patterns %q and %q are one route once case is ignored", prev, p)
		}
		if err := handle(m.mux, low, http.NotFoundHandler()); err != nil {
			return nil, err
		}
		m.original[low] = p
	}
	return m, nil
}

// lowerPattern lowercases a ServeMux pattern's host and path, not its
// method.
func lowerPattern(p string) string {
	method, rest, ok := strings.Cut(p, " ")
	if !ok || strings.HasPrefix(method, "/") {
		return strings.ToLower(p)
	}
	return method + " " + strings.ToLower(strings.TrimLeft(rest, " \t"))
}

// match returns the operation of r, the method and its route as given in
// -routes, and that route; "" when no route matches.
func (m *routeMatcher) match(r *http.Request) (op, route string) {
	probe := r.Clone(r.Context())
	probe.URL.Path, probe.URL.RawPath = normalPath(r.URL.Path), ""
	probe.Host = strings.ToLower(r.Host)
	_, pattern := m.mux.Handler(probe)
	if pattern == "" {
		return "", ""
	}
	p, ok := m.original[pattern]
	if !ok {
		// A redirect the mux would make (/charges to the subtree
		// /charges/): the route after it.
		if p, ok = m.original[r.Method+" "+pattern]; !ok {
			return "", ""
		}
	}
	if strings.HasPrefix(p, r.Method+" ") {
		return p, p
	}
	return r.Method + " " + p, p
}

// normalPath lowercases path and cleans it (path.Clean: repeated slashes,
// dot segments and a trailing slash go).
func normalPath(p string) string {
	return path.Clean("/" + strings.ToLower(p))
}
