package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemotel"
)

// deps are what a test may replace; the zero value is production's.
type deps struct {
	meters  metric.MeterProvider // nil: the global one
	tracers trace.TracerProvider // nil: the global one
	now     func() time.Time     // a JWT's clock; nil: time.Now
	// storeClock is memstore's clock (its expiry of records); nil: the
	// system's.
	storeClock func() time.Time
}

// gateway is the proxy's handler and the state its health endpoints read.
type gateway struct {
	cfg      *config
	st       *openedStore
	log      *slog.Logger
	handler  http.Handler
	draining atomic.Bool
	// otlp is the OTLP export of -otlp-endpoint; nil without it.
	otlp *telemetry
}

// readyTimeout bounds the store check of one /readyz.
const readyTimeout = 2 * time.Second

// newGateway opens the store and builds the handler: /healthz and /readyz,
// the routes of -routes through idemhttp (and the JWT check) to the
// upstream, and every other request straight to the upstream.
func newGateway(ctx context.Context, c *config, log *slog.Logger, d deps) (g *gateway, err error) {
	if d.now == nil {
		d.now = time.Now
	}
	var verify *jwtVerifier
	if c.jwtHMACFile != "" || c.jwtPublicFile != "" {
		if verify, err = newJWTVerifier(c, d.now); err != nil {
			return nil, err
		}
	}
	st, err := openStore(ctx, c, d)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	g = &gateway{cfg: c, st: st, log: log}

	var metrics *sdkmetric.ManualReader
	if c.metricsPath != "" && d.meters == nil {
		metrics = sdkmetric.NewManualReader()
	}
	switch {
	case c.otlpEndpoint != nil && d.meters == nil && d.tracers == nil:
		// One meter provider for both: the Prometheus text's reader
		// beside OTLP's periodic one.
		var readers []sdkmetric.Reader
		if metrics != nil {
			readers = append(readers, metrics)
		}
		if g.otlp, err = newTelemetry(ctx, c, readers...); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				_ = g.otlp.shutdown(context.Background())
			}
		}()
		d.meters, d.tracers = g.otlp.meters, g.otlp.tracers
	case metrics != nil:
		d.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
	}
	var otelOpts []idemotel.Option
	otelOpts = append(otelOpts, idemotel.WithStoreName(c.storeKind))
	if d.meters != nil {
		otelOpts = append(otelOpts, idemotel.WithMeterProvider(d.meters))
	}
	if d.tracers != nil {
		otelOpts = append(otelOpts, idemotel.WithTracerProvider(d.tracers))
	}
	// The middleware scopes its keys by tenant itself (idemhttp's
	// WithTenant); the executor's tenancy is the single one. Renewal keeps
	// a claim while a slow backend answers.
	ex := idem.NewExecutor(st.store, idem.SingleTenant(), idem.WithRenewal(true), idemotel.Instrument(otelOpts...))

	upstream := upstreamHandler(c, log)
	own := []string{"GET /healthz", "GET /readyz"}
	if c.metricsPath != "" {
		own = append(own, "GET "+c.metricsPath)
	}
	routes, err := newRouteMatcher(c.routes, own)
	if err != nil {
		return nil, fmt.Errorf("-routes (%s): %w", envName("routes"), err)
	}
	// The keyed handler of each route of -route-config, with its settings;
	// keyed serves every other route, with the flags'.
	keyedFor := func(rc *config, up http.Handler) (http.Handler, error) {
		mw, err := middleware(ex, rc, verify, log, routes)
		if err != nil {
			if rc != c {
				err = fmt.Errorf("-route-config, route %q: %w", rc.routes[0], err)
			}
			return nil, err
		}
		h := mw(up)
		if verify != nil {
			h = verify.middleware(h)
		}
		return h, nil
	}
	keyed, err := keyedFor(c, upstream)
	if err != nil {
		return nil, err
	}
	perRoute := map[string]http.Handler{}
	for _, rc := range c.perRoute {
		if perRoute[rc.routes[0]], err = keyedFor(rc, upstreamHandler(rc, log)); err != nil {
			return nil, err
		}
	}

	mux := http.NewServeMux()
	if err := handle(mux, "GET /healthz", http.HandlerFunc(g.healthz)); err != nil {
		return nil, err
	}
	if err := handle(mux, "GET /readyz", http.HandlerFunc(g.readyz)); err != nil {
		return nil, err
	}
	if metrics != nil {
		if err := handle(mux, "GET "+c.metricsPath, metricsHandler(metrics)); err != nil {
			return nil, fmt.Errorf("-metrics-path (%s): %w", envName("metrics-path"), err)
		}
	}
	mux.Handle("/", upstream)
	// A request with a method of -methods whose path matches a route of
	// -routes, ignoring case, repeated slashes and a trailing slash, is
	// keyed; every other request passes through (docs/GATEWAY.md,
	// "Routes").
	keyedMethods := map[string]bool{}
	for _, rc := range append([]*config{c}, c.perRoute...) {
		for _, m := range rc.methods {
			keyedMethods[m] = true
		}
	}
	top := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !keyedMethods[r.Method] {
			mux.ServeHTTP(w, r)
			return
		}
		if op, pattern := routes.match(r); op != "" {
			rc, h := c, keyed
			if ph, ok := perRoute[pattern]; ok {
				rc, h = c.settingsFor(pattern), ph
			}
			if slices.Contains(rc.methods, r.Method) {
				h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, op)))
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
	g.handler = top
	return g, nil
}

// upstreamHandler is the proxy to -upstream with c's settings (its time
// bound, -unknown-outcome), the client's writer in the context for the
// proxy's ModifyResponse.
func upstreamHandler(c *config, log *slog.Logger) http.Handler {
	proxy := newProxy(c, log)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), writerKey{}, w), c.upstreamTimeout)
		defer cancel()
		proxy.ServeHTTP(w, r.WithContext(ctx))
	})
}

// middleware builds idemhttp's middleware from the config; an invalid
// setting, which idemhttp.New reports by a panic, is returned as an error.
func middleware(ex *idem.Executor, c *config, verify *jwtVerifier, log *slog.Logger, routes *routeMatcher) (mw func(http.Handler) http.Handler, err error) {
	opts := []idemhttp.Option{
		idemhttp.WithOperation(func(r *http.Request) string {
			if op, ok := r.Context().Value(routeKey{}).(string); ok {
				return op
			}
			op, _ := routes.match(r)
			return op
		}),
		idemhttp.WithStoredHeaders(c.storedHeaders...),
		idemhttp.WithMethods(c.methods...),
		idemhttp.WithTTL(c.ttl),
		idemhttp.WithWait(c.wait),
		idemhttp.WithMaxBody(c.maxBody),
		idemhttp.WithMaxResponse(c.maxResponse),
		idemhttp.WithObserver(func(ev idemhttp.Event) {
			level := slog.LevelDebug
			switch ev.Kind {
			case idemhttp.EventStoreError, idemhttp.EventStoreFull, idemhttp.EventStoreBusy, idemhttp.EventNotReplayable,
				idemhttp.EventResponseTooLarge, idemhttp.EventOutcomeUnknown:
				// The last two: a response sent but not stored, its key
				// kept: every retry of it will be refused.
				level = slog.LevelWarn
			}
			log.Log(context.Background(), level, "idempotency", "event", ev.Kind.String(), "op", ev.Op,
				"status", ev.Status, "derived", ev.Derived, "err", ev.Err)
		}),
	}
	if c.lease > 0 {
		opts = append(opts, idemhttp.WithLease(c.lease))
	}
	if c.deriveWindow != 0 {
		opts = append(opts, idemhttp.WithDerivedKey(c.deriveWindow))
	}
	switch {
	case c.singleTenant:
		opts = append(opts, idemhttp.SingleTenant())
	case verify != nil:
		opts = append(opts, idemhttp.WithTenant(tenantFromContext))
	default:
		name := c.tenantHeader
		opts = append(opts, idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get(name) }))
	}
	defer func() {
		if p := recover(); p != nil {
			mw, err = nil, fmt.Errorf("%v (flags: -methods, -ttl, -lease, -wait, -derive-window, -max-body, -max-response, -stored-headers)", p)
		}
	}()
	return idemhttp.New(ex, opts...), nil
}

// handle registers pattern, returning the mux's panic (an invalid or
// conflicting pattern) as an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pattern %q: %v", pattern, p)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

// healthz answers 200 while the process serves.
func (g *gateway) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 200 when the store answers (for pgstore: its table) and
// the gateway is not shutting down, else 503 with the reason.
func (g *gateway) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if g.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("shutting down\n"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := g.st.ready(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v: %w", readyTimeout, err)
		}
		g.log.Warn("not ready", "store", g.cfg.storeKind, "err", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "store %s: %v\n", g.cfg.storeKind, err)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}
