package idemhttptest

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// NetHTTP is the Mount of net/http itself: cfg served on a Go 1.22+
// ServeMux, one route per path, each wrapped by idemhttp.New (built in the
// calling goroutine, so that its panic reaches the suite), on a loopback
// server whose error log is discarded (the panics the suite provokes). A
// store that is not a package of the runtime's module (sqlitestore) runs
// the suite through it.
func NetHTTP(t *testing.T, cfg Config) string {
	mw := idemhttp.New(cfg.Executor, cfg.Options...)
	mux := http.NewServeMux()
	for _, p := range cfg.Paths {
		mux.Handle(p, mw(cfg.Handler))
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}
