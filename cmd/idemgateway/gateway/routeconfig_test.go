package gateway

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func routesFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRouteConfig: a route of -route-config is keyed with its own settings
// (here a 64-byte -max-response and a 100ms -upstream-timeout), every
// other route with the flags'.
func TestRouteConfig(t *testing.T) {
	var runs atomic.Int64
	stop := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if strings.HasSuffix(r.URL.Path, "/slow") {
			select {
			case <-stop:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(bytes.Repeat([]byte("r"), 100))
	}))
	t.Cleanup(backend.Close)
	t.Cleanup(func() { close(stop) }) // before Close, which waits for the handlers
	cfg := routesFile(t, `[
		{"route": "POST /reports", "max_response": 64},
		{"route": "POST /slow", "upstream_timeout": "100ms", "methods": ["POST"]}
	]`)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", backend.URL, "-single-tenant",
		"-routes", "POST /charges", "-route-config", cfg)
	key := idemhttp.GenerateKey()
	resp, _ := send(t, "POST", g.url("/reports"), key, "{}")
	if resp.StatusCode != 201 || resp.Header.Get(idemhttp.NotStoredHeader) != "too-large" {
		t.Fatalf("/reports (its max_response 64): %d %v", resp.StatusCode, resp.Header)
	}
	resp, body := send(t, "POST", g.url("/reports"), key, "{}")
	wantRule(t, resp, body, 500, "response-not-replayable")
	for i, replayed := range []string{"", "true"} { // the flags' 1 MiB
		resp, _ = send(t, "POST", g.url("/charges"), key, "{}")
		if resp.StatusCode != 201 || resp.Header.Get(idemhttp.ReplayedHeader) != replayed {
			t.Fatalf("/charges %d: %d %v", i, resp.StatusCode, resp.Header)
		}
	}
	resp, body = send(t, "POST", g.url("/slow"), key, "{}")
	wantRule(t, resp, body, http.StatusGatewayTimeout, "upstream-timeout")
	if runs.Load() != 3 {
		t.Fatalf("the backend ran %d times, want 3", runs.Load())
	}
}

// TestRouteConfigRefused: a file the gateway cannot apply stops it before
// it serves, naming the file, the entry and the setting.
func TestRouteConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"not json", `{`, "want a JSON array"},
		{"unknown setting", `[{"route": "POST /a", "ttl_seconds": 5}]`, `unknown field "ttl_seconds"`},
		{"no route", `[{"ttl": "1h"}]`, "entry 0 (route \"\"): route: required"},
		{"twice", `[{"route": "POST /a"}, {"route": "POST /A"}]`, "entry 1 (route \"POST /A\"): route: given twice"},
		{"bad duration", `[{"route": "POST /a", "ttl": "soon"}]`, "soon"},
		{"lease under the upstream timeout", `[{"route": "POST /a", "lease": "5s", "upstream_timeout": "10s"}]`, "entry 0 (route \"POST /a\"): lease: 5s is shorter than -upstream-timeout 10s"},
		{"write timeout too short for the route", `[{"route": "POST /a", "upstream_timeout": "100s", "lease": "2m"}]`, "write-timeout: 2m0s is not more than"},
		{"Set-Cookie", `[{"route": "POST /a", "stored_headers": ["Set-Cookie"]}]`, "stored_headers: Set-Cookie is never stored"},
		{"bad mode", `[{"route": "POST /a", "unknown_outcome": "maybe"}]`, `unknown_outcome: "maybe"`},
		{"idemhttp refuses", `[{"route": "POST /a", "max_response": 0}]`, `-route-config, route "POST /a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			err := run(t.Context(), []string{"-listen", "127.0.0.1:0", "-upstream", "http://127.0.0.1:9", "-store", "memory", "-single-tenant",
				"-route-config", routesFile(t, tc.file)}, func(string) string { return "" }, &log, deps{}, func(string) { t.Error("the gateway started") })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}
