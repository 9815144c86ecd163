package idemecho_test

import (
	"io"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemgen/idemgen/internal/testenv/everystore"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
)

// newEcho returns an echo instance that logs nothing, with echo's Recover
// middleware.
func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}))
	return e
}

// mount serves cfg on echo, the handler mounted by echo.WrapHandler behind
// idemecho.New.
func mount(t *testing.T, cfg idemhttptest.Config) string {
	e := newEcho()
	e.Use(idemecho.New(cfg.Executor, cfg.Options...))
	for _, p := range cfg.Paths {
		e.Any(p, echo.WrapHandler(cfg.Handler))
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConformance runs the shared HTTP suite (idemhttptest) on echo, on
// every store.
func TestConformance(t *testing.T) {
	everystore.Run(t, "idemecho_test_", func(t *testing.T, newStore everystore.NewStore) {
		idemhttptest.Run(t, idemhttptest.Options{NewStore: newStore, Mount: mount})
	})
}
