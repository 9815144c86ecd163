// Package gateway is the idemgateway command (docs/GATEWAY.md) as a
// package: Run is the command, so that a program or a test can run it in
// process (examples/gateway does).
package gateway

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
)

// ErrUsage is wrapped by the error of Run for a configuration error (a
// bad flag or variable), which Run has already printed with a hint; the
// command exits 2 on it.
var ErrUsage = errors.New("usage")

// Run runs the gateway configured by args (the command's flags) and, for
// each flag not in args, its IDEMGW_ variable read through getenv, until
// ctx ends; then it shuts down gracefully: /readyz answers 503, the
// listener closes, and requests in flight finish within -shutdown-timeout.
// It logs to stderr, and calls listening, when not nil, with the address
// it serves on once it accepts connections. A configuration error is
// returned at once, wrapping ErrUsage (or flag.ErrHelp for -h), before
// anything listens.
func Run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, listening func(addr string)) error {
	return run(ctx, args, getenv, stderr, deps{}, listening)
}

// run is Run with the dependencies a test replaces.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, d deps, listening func(addr string)) error {
	c, err := parseConfig(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		fmt.Fprintf(stderr, "idemgateway: %v\n(idemgateway -h lists the flags)\n", err)
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.logLevel}))
	g, err := newGateway(ctx, c, log, d)
	if err != nil {
		return err
	}
	defer g.st.close()
	if g.otlp != nil {
		// Last, after the requests in flight: export what the
		// providers still hold, within a bound of its own.
		defer func() {
			fctx, cancel := context.WithTimeout(context.Background(), otlpFlushTimeout)
			defer cancel()
			if err := g.otlp.shutdown(fctx); err != nil {
				log.Warn("OTLP export at shutdown failed: the last spans and metrics are lost",
					"endpoint", c.otlpEndpoint.String(), "err", err)
			}
		}()
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("-listen (%s): %w", envName("listen"), err)
	}
	srv := &http.Server{Handler: g.handler, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ReadHeaderTimeout: c.readHeaderTimeout, ReadTimeout: c.readTimeout, WriteTimeout: c.writeTimeout, IdleTimeout: c.idleTimeout}
	log.Info("serving", "addr", ln.Addr().String(), "upstream", c.upstream.String(), "store", c.storeKind,
		"routes", c.routes, "methods", c.methods, "tenancy", c.tenancy(), "derive_window", c.deriveWindow,
		"upstream_timeout", c.upstreamTimeout, "unknown_outcome", c.unknownOutcome, "otlp", c.otlpTarget())
	if !slices.Contains(c.routes, "/") {
		log.Info("requests outside -routes pass through without keys", "routes", c.routes,
			"hint", "-routes / keys every path; a route matches ignoring case, repeated slashes and a trailing slash")
	}
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
