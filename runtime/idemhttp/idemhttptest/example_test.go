package idemhttptest_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// An adapter's test: a Mount serves the suite's handler behind the adapter
// (here idemhttp itself on a ServeMux) on a loopback server; the suite runs
// on a store of the test's choosing (every store, in this repository's
// adapters: internal/testenv/everystore).
func ExampleRun() {
	mount := func(t *testing.T, cfg idemhttptest.Config) string {
		mw := idemhttp.New(cfg.Executor, cfg.Options...) // in the calling goroutine: a panic reaches the suite
		mux := http.NewServeMux()
		for _, p := range cfg.Paths {
			mux.Handle(p, mw(cfg.Handler))
		}
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	_ = func(t *testing.T) { // func TestConformance(t *testing.T)
		idemhttptest.Run(t, idemhttptest.Options{
			NewStore: func(*testing.T) idem.Store { return memstore.New() },
			Mount:    mount,
		})
	}
}
