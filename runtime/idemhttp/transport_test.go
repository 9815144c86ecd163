package idemhttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
)

// TestNothingBelowResends: a keyed POST on a reused keep-alive connection
// that the server closes after reading it (it may have acted) reaches the
// server once through every RoundTripper this package builds: the caller
// gets the error, never a second run's answer. The control row proves the
// scenario is the one where net/http's own Transport resends.
func TestNothingBelowResends(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rt      func() http.RoundTripper
		resends bool
	}{
		{"control: bare http.Transport", func() http.RoundTripper { return &http.Transport{} }, true},
		{"Transport, nil Base", func() http.RoundTripper { return &idemhttp.Transport{} }, false},
		{"Transport, http.Transport Base", func() http.RoundTripper { return &idemhttp.Transport{Base: &http.Transport{}} }, false},
		{"SendOnce", func() http.RoundTripper { return idemhttp.NewSendOnce(nil) }, false},
		{"SendOnce under a keyed client", func() http.RoundTripper { return idemhttp.NewSendOnce(&http.Transport{}) }, false},
	} {
		for _, body := range []string{`{"amount":5}`, ""} {
			t.Run(tc.name+"/body="+body, func(t *testing.T) {
				up := idemhttptest.NewBreakingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusCreated)
				}))
				rt := tc.rt()
				t.Cleanup(func() {
					if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
						c.CloseIdleConnections()
					}
				})
				c := &http.Client{Transport: rt}
				send := func() (*http.Response, error) {
					// NewRequest sets GetBody for a strings.Reader: the
					// request looks replayable to net/http.
					req, err := http.NewRequestWithContext(context.Background(), "POST", up.URL+"/charges", strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set(idemhttp.Header, idemhttp.GenerateKey())
					return c.Do(req)
				}
				resp, err := send() // warms a keep-alive connection
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				resp, err = send() // the server reads it and breaks the connection
				if err == nil {
					resp.Body.Close()
				}
				runs := up.Runs.Load()
				if tc.resends {
					if runs != 3 || err != nil {
						t.Fatalf("control: %d runs, err %v; want 3 runs and an answer (net/http resent)", runs, err)
					}
					return
				}
				// Two requests sent, two runs: the second either broke its
				// reused connection and failed (a body: sent once), or went
				// over a fresh connection (no body: never on a reused one).
				if runs != 2 || (err == nil) != (up.Broken.Load() == 0) {
					t.Fatalf("%d runs, err %v, %d broken connections; want 2 runs, and an error exactly when a connection broke", runs, err, up.Broken.Load())
				}
			})
		}
	}
}
