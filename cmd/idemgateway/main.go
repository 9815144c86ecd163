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
// -metrics-path serves the metrics in the Prometheus text format;
// -otlp-endpoint pushes the spans and metrics over OTLP/HTTP.
// idemgateway -h starts with a command line that works as it is; every
// flag, and its IDEMGW_ environment variable: docs/GATEWAY.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgen/idemgen/cmd/idemgateway/gateway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := gateway.Run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, gateway.ErrUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "idemgateway:", err)
		os.Exit(1)
	}
}
