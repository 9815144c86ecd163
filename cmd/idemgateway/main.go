// Command idemgateway is a reverse proxy that makes a backend's requests
// idempotent by their Idempotency-Key header, whatever the backend is
// written in: idemhttp in front of net/http/httputil.ReverseProxy, on
// memstore, pgstore or redisstore.
//
//	idemgateway -upstream http://127.0.0.1:9000 -store postgres://gw@db/gw \
//		-routes 'POST /charges,POST /orders' -jwt-public-key-file /etc/gw/jwt.pem
//
// The first request with a key goes to the backend; its response is stored
// and replayed, byte for byte, to every retry with the same key, marked
// "Idempotent-Replayed: true". Keys are scoped by tenant (a header the
// authenticating proxy sets, or a claim of a verified JWT) and by route.
// /healthz answers while the process runs; /readyz while the store answers
// and the gateway is not shutting down. SIGTERM or SIGINT stops accepting,
// lets requests in flight finish (-shutdown-timeout) and exits.
// Every flag, and its IDEMGW_ environment variable: docs/GATEWAY.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, deps{}, nil)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "idemgateway:", err)
		os.Exit(1)
	}
}

// errUsage marks a configuration error, already printed.
var errUsage = errors.New("usage")

// run runs the gateway until ctx ends, then shuts it down gracefully. It
// calls listening, when not nil, with the address it serves on.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, d deps, listening func(addr string)) error {
	c, err := parseConfig(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		fmt.Fprintf(stderr, "idemgateway: %v\n(idemgateway -h lists the flags)\n", err)
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.logLevel}))
	g, err := newGateway(ctx, c, log, d)
	if err != nil {
		return err
	}
	defer g.st.close()
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("-listen (%s): %w", envName("listen"), err)
	}
	srv := &http.Server{Handler: g.handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	log.Info("serving", "addr", ln.Addr().String(), "upstream", c.upstream.String(), "store", c.storeKind,
		"routes", c.routes, "methods", c.methods, "tenancy", c.tenancy(), "derive_window", c.deriveWindow)
	if listening != nil {
		listening(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Not ready from now on, so that a load balancer stops sending; then
	// stop accepting and let the requests in flight finish, and store
	// their responses, before the store's connections close.
	g.draining.Store(true)
	log.Info("shutting down", "timeout", c.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: requests still in flight after -shutdown-timeout %v: %w", c.shutdownTimeout, err)
	}
	return nil
}
