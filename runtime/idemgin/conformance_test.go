package idemgin_test

import (
	"io"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/internal/testenv/everystore"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	os.Exit(m.Run())
}

// mount serves cfg on gin's engine with its recovery middleware, the
// handler mounted by gin.WrapH behind idemgin.New.
func mount(t *testing.T, cfg idemhttptest.Config) string {
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), idemgin.New(cfg.Executor, cfg.Options...))
	for _, p := range cfg.Paths {
		r.Any(p, gin.WrapH(cfg.Handler))
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConformance runs the shared HTTP suite (idemhttptest) on gin, on
// every store.
func TestConformance(t *testing.T) {
	everystore.Run(t, "idemgin_test_", func(t *testing.T, newStore everystore.NewStore) {
		idemhttptest.Run(t, idemhttptest.Options{NewStore: newStore, Mount: mount})
	})
}
