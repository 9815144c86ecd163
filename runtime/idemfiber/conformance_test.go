package idemfiber_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/gofiber/fiber/v3/middleware/recover"

	"github.com/idemgen/idemgen/internal/testenv/everystore"
	"github.com/idemgen/idemgen/runtime/idemfiber"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
)

// serve runs app on a loopback port until t ends and returns its base URL.
func serve(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
	}()
	t.Cleanup(func() {
		_ = app.Shutdown()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// mount serves cfg on Fiber with its recover middleware, the handler
// run as a Fiber handler (netHTTP) behind idemfiber.New.
func mount(t *testing.T, cfg idemhttptest.Config) string {
	app := fiber.New()
	app.Use(recover.New(), idemfiber.New(cfg.Executor, cfg.Options...))
	for _, p := range cfg.Paths {
		app.All(p, netHTTP(cfg.Handler))
	}
	return serve(t, app)
}

// TestConformance runs the shared HTTP suite (idemhttptest) on Fiber, on
// every store.
func TestConformance(t *testing.T) {
	everystore.Run(t, "idemfiber_test_", func(t *testing.T, newStore everystore.NewStore) {
		idemhttptest.Run(t, idemhttptest.Options{NewStore: newStore, Mount: mount})
	})
}

// netHTTP runs h as a Fiber handler: synchronously, writing to Fiber's
// response, a panic propagating, as a Fiber handler does (Fiber's
// adaptor.HTTPHandler runs h in another goroutine and turns a panic after
// a flush into a complete response).
func netHTTP(h http.Handler) fiber.Handler {
	return func(c fiber.Ctx) error {
		r, err := adaptor.ConvertRequest(c, true)
		if err != nil {
			return err
		}
		w := &fiberWriter{c: c, header: http.Header{}}
		h.ServeHTTP(w, r.WithContext(c.Context()))
		if !w.wrote {
			w.WriteHeader(http.StatusOK)
		}
		return nil
	}
}

type fiberWriter struct {
	c      fiber.Ctx
	header http.Header
	wrote  bool
}

func (w *fiberWriter) Header() http.Header { return w.header }

func (w *fiberWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.c.Status(code)
	for k, vs := range w.header {
		for _, v := range vs {
			w.c.Response().Header.Add(k, v)
		}
	}
}

func (w *fiberWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.c.Response().AppendBody(p)
	return len(p), nil
}
