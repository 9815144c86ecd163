package idemhttptest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
)

// RetryingTransport is an http.RoundTripper that retries on its own, as a
// client library configured for retries does (go-retryablehttp's default
// policy): an attempt that failed in transport (a timeout, a connection
// reset, an EOF before the answer) or was answered 429 or a 5xx other than
// 501 is sent again, the same method, URL, header fields (its
// Idempotency-Key among them, or none) and body, until an attempt gets
// another answer or Attempts have been sent. It is for the tests of a door
// or a gateway in front of such clients: the handler behind must run once
// per key however often the client resends.
//
// Each attempt's response body is read whole before RoundTrip returns (so
// that an attempt's timeout covers its answer). It is safe for concurrent
// use if BeforeRetry is.
type RetryingTransport struct {
	// Base sends each attempt; nil uses a Transport without keep-alives,
	// so that every attempt opens a connection of its own.
	Base http.RoundTripper
	// Attempts is the most attempts of one request; values below 1 mean 1.
	Attempts int
	// AttemptContext, unless nil, returns the context of attempt n (from
	// 1), derived from the request's, and its cancel, called once the
	// attempt's answer is read whole: a client's per-attempt timeout. A
	// test ends the first attempt when its handler has started (a timeout
	// shorter than the handler, whatever the machine's speed), and gives
	// the others a hang guard.
	AttemptContext func(ctx context.Context, n int) (context.Context, context.CancelFunc)
	// BeforeRetry, unless nil, is called before attempt n (n >= 2) with
	// the previous attempt's status (0 when it failed in transport) and
	// error: a test orders the retry against its handler here.
	BeforeRetry func(n, status int, err error)

	sent atomic.Int64
}

// Sent returns how many attempts the transport has sent.
func (rt *RetryingTransport) Sent() int64 { return rt.sent.Load() }

// retryable reports whether an attempt's answer is one the transport
// retries.
func retryable(status int, err error) bool {
	return err != nil || status == http.StatusTooManyRequests || (status >= 500 && status != http.StatusNotImplemented)
}

// RoundTrip implements http.RoundTripper.
func (rt *RetryingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	base := rt.Base
	if base == nil {
		base = &http.Transport{DisableKeepAlives: true}
	}
	var (
		resp *http.Response
		err  error
	)
	for n := 1; ; n++ {
		if n > 1 && rt.BeforeRetry != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			rt.BeforeRetry(n, status, err)
		}
		resp, err = rt.attempt(req, body, base, n)
		if !retryable(statusOf(resp), err) || n >= rt.Attempts {
			return resp, err
		}
	}
}

func statusOf(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// attempt sends attempt n of req with body, and reads its answer whole.
func (rt *RetryingTransport) attempt(req *http.Request, body []byte, base http.RoundTripper, n int) (*http.Response, error) {
	ctx := req.Context()
	if rt.AttemptContext != nil {
		var cancel context.CancelFunc
		ctx, cancel = rt.AttemptContext(ctx, n)
		defer cancel()
	}
	r := req.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	rt.sent.Add(1)
	resp, err := base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	return resp, nil
}
