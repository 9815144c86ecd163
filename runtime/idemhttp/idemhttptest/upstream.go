package idemhttptest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// BreakingUpstream is a real server on loopback for the class "nothing
// below us resends on its own": it counts every request that reaches it
// (Runs), reads its body, and answers the first request of each
// connection with h; the second request of a connection (one sent on a
// reused keep-alive connection) is read whole, counted, and then the
// connection is closed without an answer, as a backend that crashed after
// acting would. A layer that resends it makes Runs exceed the requests
// sent.
type BreakingUpstream struct {
	// URL is the server's base URL.
	URL string
	// Runs counts the requests that reached the server.
	Runs atomic.Int64
	// Broken counts the connections closed without an answer.
	Broken atomic.Int64
}

type connCountKey struct{}

// NewBreakingUpstream starts a BreakingUpstream answering with h; it stops
// when t ends.
func NewBreakingUpstream(t testing.TB, h http.Handler) *BreakingUpstream {
	u := &BreakingUpstream{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.Runs.Add(1)
		if n := r.Context().Value(connCountKey{}).(*atomic.Int64).Add(1); n == 2 {
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			u.Broken.Add(1)
			_ = c.Close()
			return
		}
		h.ServeHTTP(w, r)
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connCountKey{}, new(atomic.Int64))
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u.URL = srv.URL
	return u
}
