package idemhttp_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemgen/idemgen/internal/testenv/everystore"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
)

// mountNetHTTP serves cfg on a Go 1.22+ ServeMux, one route per path, each
// wrapped by idemhttp.New: net/http is the first adapter of the shared
// suite.
func mountNetHTTP(t *testing.T, cfg idemhttptest.Config) string {
	mw := idemhttp.New(cfg.Executor, cfg.Options...)
	mux := http.NewServeMux()
	for _, p := range cfg.Paths {
		mux.Handle(p, mw(cfg.Handler))
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics the suite provokes
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConformance runs the shared HTTP suite (idemhttptest) on net/http,
// on every store.
func TestConformance(t *testing.T) {
	everystore.Run(t, "idemhttp_conf_", func(t *testing.T, newStore everystore.NewStore) {
		idemhttptest.Run(t, idemhttptest.Options{NewStore: newStore, Mount: mountNetHTTP})
	})
}
