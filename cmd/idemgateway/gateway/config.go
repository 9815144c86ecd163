package gateway

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/idemgen/idemgen/internal/storeopen"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// envPrefix prefixes the environment variable of every flag: -store is
// IDEMGW_STORE, -jwt-public-key-file is IDEMGW_JWT_PUBLIC_KEY_FILE. A flag
// on the command line wins over its variable.
const envPrefix = "IDEMGW_"

// config is the gateway's configuration, from flags and the environment.
type config struct {
	listen          string
	upstream        *url.URL
	store           string // the DSN as given
	storeKind       string // memory, postgres, mysql, redis
	pgTable         string
	mysqlTable      string
	migrate         bool
	redisPrefix     string
	routes          []string
	methods         []string
	tenantHeader    string
	singleTenant    bool
	jwtClaim        string
	jwtHMACFile     string
	jwtPublicFile   string
	jwtIssuer       string
	jwtAudience     string
	ttl             time.Duration
	lease           time.Duration
	wait            time.Duration
	deriveWindow    time.Duration
	maxBody         int64
	maxResponse     int
	shutdownTimeout time.Duration
	logLevel        slog.Level
	metricsPath     string
	otlpEndpoint    *url.URL      // -otlp-endpoint; nil: no OTLP export
	otlpInterval    time.Duration // how often the metrics are pushed

	upstreamTimeout   time.Duration
	readTimeout       time.Duration
	readHeaderTimeout time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	unknownOutcome    string   // keep or release
	storedHeaders     []string // the response header fields stored and replayed

	routeConfig string    // -route-config: the file
	perRoute    []*config // a copy of the config per route of the file, its settings applied
}

// Defaults of the time bounds (docs/GATEWAY.md, "Time bounds").
const (
	defaultUpstreamTimeout   = 25 * time.Second
	defaultReadTimeout       = 30 * time.Second
	defaultReadHeaderTimeout = 10 * time.Second
	defaultWriteTimeout      = 2 * time.Minute
	defaultIdleTimeout       = 2 * time.Minute
)

// effectiveLease is the lease of a claim: -lease, or the executor's
// default.
func (c *config) effectiveLease() time.Duration {
	if c.lease > 0 {
		return c.lease
	}
	return idem.DefaultLease
}

// tenancy says where a request's tenant comes from.
func (c *config) tenancy() string {
	switch {
	case c.singleTenant:
		return "single"
	case c.tenantHeader != "":
		return "header " + c.tenantHeader
	default:
		return "jwt claim " + c.jwtClaim
	}
}

// selfUpstream reports whether upstream is the gateway's own listen
// address: the same port, on a host that reaches this process's listener
// (loopback, or any host when the listener has none or a wildcard one).
// A different host of the same port may be another machine; only names
// that are certainly this process are refused.
func selfUpstream(listen string, upstream *url.URL) bool {
	lhost, lport, err := net.SplitHostPort(listen)
	if err != nil || lport == "0" {
		return false
	}
	uport := upstream.Port()
	if uport == "" {
		uport = map[string]string{"http": "80", "https": "443"}[upstream.Scheme]
	}
	if uport != lport {
		return false
	}
	local := func(h string) bool {
		if h == "localhost" {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	uhost := upstream.Hostname()
	switch {
	case lhost == "" || lhost == "0.0.0.0" || lhost == "::":
		return local(uhost)
	default:
		return uhost == lhost || local(uhost) && local(lhost)
	}
}

// otlpTarget is where the OTLP export goes, for the start's log line.
func (c *config) otlpTarget() string {
	if c.otlpEndpoint == nil {
		return "off"
	}
	return c.otlpEndpoint.String()
}

// envName is the environment variable of flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parseConfig reads the flags in args and, for each flag not on the
// command line, its IDEMGW_ variable from getenv. Every error names the
// flag and its variable, and says what is expected.
func parseConfig(args []string, getenv func(string) string, usage io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("idemgateway", flag.ContinueOnError)
	fs.SetOutput(usage)
	var upstream, routes, methods, logLevel, storedHeaders, otlpEndpoint string
	fs.StringVar(&c.listen, "listen", ":8080", "address to serve on")
	fs.StringVar(&upstream, "upstream", "", "the backend's base URL, http:// or https://")
	fs.StringVar(&c.store, "store", "", "the idempotency store: memory (one instance, lost on restart), postgres://… or postgresql://… (pgstore), mysql://user:pass@host:port/db or mysql:// and a go-sql-driver/mysql DSN (mysqlstore: MySQL, MariaDB), redis://… or rediss://… (redisstore)")
	fs.StringVar(&c.pgTable, "pg-table", pgstore.DefaultTable, "pgstore's table (optionally schema-qualified)")
	fs.StringVar(&c.mysqlTable, "mysql-table", mysqlstore.DefaultTable, "mysqlstore's table (optionally database-qualified)")
	fs.BoolVar(&c.migrate, "migrate", false, "create or upgrade pgstore's or mysqlstore's table at start (else apply the store's migrations beforehand)")
	fs.StringVar(&c.redisPrefix, "redis-prefix", "", "prefix of redisstore's keys (default redisstore's own)")
	fs.StringVar(&routes, "routes", "/", "comma-separated net/http.ServeMux patterns whose requests need keys, e.g. \"POST /charges,/orders/{id}\"; the pattern is the operation that scopes keys; other requests pass through")
	fs.StringVar(&methods, "methods", "POST,PATCH", "comma-separated methods that need keys on those routes")
	fs.StringVar(&c.tenantHeader, "tenant-header", "", "take the tenant from this request header, set by the authenticating proxy in front of the gateway")
	fs.BoolVar(&c.singleTenant, "single-tenant", false, "every client shares one key space (only when the clients trust each other)")
	fs.StringVar(&c.jwtClaim, "jwt-claim", "sub", "the claim of a verified JWT (Authorization: Bearer) that names the tenant")
	fs.StringVar(&c.jwtHMACFile, "jwt-hmac-secret-file", "", "take the tenant from a JWT verified with the HMAC secret in this file (HS256, HS384, HS512)")
	fs.StringVar(&c.jwtPublicFile, "jwt-public-key-file", "", "take the tenant from a JWT verified with the PEM public key in this file (RSA: RS*, PS*; ECDSA: ES*; Ed25519: EdDSA)")
	fs.StringVar(&c.jwtIssuer, "jwt-issuer", "", "require this iss claim")
	fs.StringVar(&c.jwtAudience, "jwt-audience", "", "require this aud claim")
	fs.DurationVar(&c.ttl, "ttl", idemhttp.DefaultTTL, "how long a stored response is replayed")
	fs.DurationVar(&c.lease, "lease", 0, "how long a claim holds before another request may take it over (renewed while the backend answers; 0: 30s)")
	fs.DurationVar(&c.wait, "wait", 0, "how long a duplicate of a request in flight waits for its response instead of a 409")
	fs.DurationVar(&c.deriveWindow, "derive-window", 0, "fallback for clients that send no key: derive it from the request and deduplicate within this window (at most "+idemhttp.MaxDerivedKeyWindow.String()+"; two identical requests inside it get one answer); 0: off, such requests get 400")
	fs.Int64Var(&c.maxBody, "max-body", idemhttp.DefaultMaxBody, "largest request body of a keyed request, in bytes (larger: 413)")
	fs.IntVar(&c.maxResponse, "max-response", idemhttp.DefaultMaxResponse, "largest response body stored, in bytes (larger: sent marked Idempotent-Not-Stored: too-large, not stored, and the key kept: retries get 500 response-not-replayable, never a second run)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM or SIGINT, how long requests in flight may finish")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&c.upstreamTimeout, "upstream-timeout", defaultUpstreamTimeout, "how long the backend may take for one request, from connecting to the last byte of its response; then 504 upstream-timeout (its outcome is unknown: see -unknown-outcome). At most the lease (-lease)")
	fs.DurationVar(&c.readTimeout, "read-timeout", defaultReadTimeout, "how long a client may take to send a request, headers and body (a stalled body is cut: 400 unreadable-body, nothing claimed)")
	fs.DurationVar(&c.readHeaderTimeout, "read-header-timeout", defaultReadHeaderTimeout, "how long a client may take to send a request's headers")
	fs.DurationVar(&c.writeTimeout, "write-timeout", defaultWriteTimeout, "how long, from the end of a request's headers, the gateway may take to answer it: more than -read-timeout + -wait + -upstream-timeout")
	fs.DurationVar(&c.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long a client's idle keep-alive connection stays open")
	fs.StringVar(&c.unknownOutcome, "unknown-outcome", "keep", "when the backend received a keyed request and then broke the connection or timed out (its outcome is unknown): keep (the key stays decided: retries get 500 response-not-replayable, the backend never runs twice) or release (retries reach the backend again: only for a backend that undoes a request it did not answer)")
	fs.StringVar(&storedHeaders, "stored-headers", strings.Join(idemhttp.DefaultStoredHeaders(), ","), "comma-separated response header fields stored and replayed (the others are sent to the first client only); Set-Cookie and the other credential fields are never stored")
	fs.StringVar(&c.routeConfig, "route-config", "", "a JSON file of per-route settings: [{\"route\": \"POST /charges\", \"ttl\": \"48h\", \"max_response\": 4194304, \"upstream_timeout\": \"10s\", …}] (docs/GATEWAY.md, \"Per-route settings\"); its routes are keyed with their settings, the flags' for every other route")
	fs.StringVar(&c.metricsPath, "metrics-path", "", "serve the idempotency metrics (runtime/idemotel) at this path in the Prometheus text format, e.g. /metrics; empty: off (without it and -otlp-endpoint the metrics go to the global OpenTelemetry provider)")
	fs.StringVar(&otlpEndpoint, "otlp-endpoint", "", "push the spans and the metrics over OTLP/HTTP (protobuf) to this collector's base URL, e.g. http://127.0.0.1:4318 (/v1/traces and /v1/metrics are appended; OTEL_EXPORTER_OTLP_HEADERS and the other OTEL_ variables of the exporters apply); beside -metrics-path; empty: off")
	fs.DurationVar(&c.otlpInterval, "otlp-interval", defaultOTLPInterval, "with -otlp-endpoint, how often the metrics are pushed (spans are sent in batches as they end; what is left is sent at shutdown)")
	fs.Usage = func() { printUsage(usage, fs) }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q (flag -%s): %w", envName(f.Name), v, f.Name, err))
			}
			set[f.Name] = true
		}
	})
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("-%s (%s): %s", name, envName(name), fmt.Sprintf(format, args...)))
	}

	if upstream == "" {
		bad("upstream", "required: the backend's base URL, e.g. http://127.0.0.1:9000")
	} else if u, err := url.Parse(upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("upstream", "%q is not an http:// or https:// URL with a host", upstream)
	} else {
		c.upstream = u
	}
	switch {
	case c.store == "":
		bad("store", "required: memory, postgres://user:pass@host/db, mysql://user:pass@host:3306/db, or redis://host:6379/0")
	case c.store == "memory":
		c.storeKind = "memory"
	case strings.HasPrefix(c.store, "postgres://"), strings.HasPrefix(c.store, "postgresql://"):
		c.storeKind = "postgres"
	case strings.HasPrefix(c.store, "mysql://"):
		if _, err := storeopen.MySQLConfig(c.store); err != nil {
			bad("store", "%q: %v", redact(c.store), err)
		} else {
			c.storeKind = "mysql"
		}
	case strings.HasPrefix(c.store, "redis://"), strings.HasPrefix(c.store, "rediss://"):
		c.storeKind = "redis"
	default:
		bad("store", "%q: want memory, postgres://…, postgresql://…, mysql://…, redis:// or rediss://…", redact(c.store))
	}
	if set["pg-table"] && c.storeKind != "postgres" {
		bad("pg-table", "given, but -store is not postgres://")
	}
	if set["mysql-table"] && c.storeKind != "mysql" {
		bad("mysql-table", "given, but -store is not mysql://")
	}
	if c.migrate && c.storeKind != "postgres" && c.storeKind != "mysql" {
		bad("migrate", "given, but -store is not postgres:// or mysql://")
	}
	if set["redis-prefix"] && c.storeKind != "redis" {
		bad("redis-prefix", "given, but -store is not redis://")
	}
	c.routes = splitList(routes)
	if len(c.routes) == 0 {
		bad("routes", "no route: give at least one ServeMux pattern (\"/\" for every path)")
	}
	c.methods = splitList(methods)
	if len(c.methods) == 0 {
		bad("methods", "no method: give at least one, e.g. POST")
	}

	var tenancies []string
	if c.tenantHeader != "" {
		tenancies = append(tenancies, "-tenant-header")
	}
	if c.singleTenant {
		tenancies = append(tenancies, "-single-tenant")
	}
	if c.jwtHMACFile != "" {
		tenancies = append(tenancies, "-jwt-hmac-secret-file")
	}
	if c.jwtPublicFile != "" {
		tenancies = append(tenancies, "-jwt-public-key-file")
	}
	switch len(tenancies) {
	case 0:
		errs = append(errs, errors.New("no tenancy chosen: give one of -tenant-header NAME (a header the authenticating proxy sets), "+
			"-jwt-hmac-secret-file or -jwt-public-key-file (a verified JWT's -jwt-claim), or -single-tenant (every client shares one key space)"))
	case 1:
	default:
		errs = append(errs, fmt.Errorf("%s: choose one tenancy", strings.Join(tenancies, " and ")))
	}
	jwt := c.jwtHMACFile != "" || c.jwtPublicFile != ""
	for _, name := range []string{"jwt-claim", "jwt-issuer", "jwt-audience"} {
		if set[name] && !jwt {
			bad(name, "given, but the tenant does not come from a JWT (-jwt-hmac-secret-file or -jwt-public-key-file)")
		}
	}
	if jwt && c.jwtClaim == "" {
		bad("jwt-claim", "empty")
	}
	if c.metricsPath != "" && !strings.HasPrefix(c.metricsPath, "/") {
		bad("metrics-path", "%q: want a path starting with /", c.metricsPath)
	}
	if c.upstream != nil && selfUpstream(c.listen, c.upstream) {
		bad("upstream", "%s is the gateway's own -listen %q: every request would loop through the gateway until it runs out of connections", c.upstream, c.listen)
	}
	if otlpEndpoint != "" {
		if u, err := checkOTLPEndpoint(otlpEndpoint); err != nil {
			bad("otlp-endpoint", "%v", err)
		} else {
			c.otlpEndpoint = u
		}
	}
	if set["otlp-interval"] && otlpEndpoint == "" {
		bad("otlp-interval", "given, but -otlp-endpoint is not: nothing is pushed")
	}
	if c.otlpInterval <= 0 {
		bad("otlp-interval", "%v: give a positive duration", c.otlpInterval)
	}
	if c.shutdownTimeout < 0 {
		bad("shutdown-timeout", "negative")
	}
	c.timeBounds(bad)
	switch c.unknownOutcome {
	case "keep", "release":
	default:
		bad("unknown-outcome", "%q: want keep or release", c.unknownOutcome)
	}
	c.storedHeaders = splitList(storedHeaders)
	for _, h := range c.storedHeaders {
		if never[http.CanonicalHeaderKey(h)] {
			bad("stored-headers", "%s is never stored: a replay would hand one client's credentials or session to whoever sends its key", h)
		}
	}
	if err := c.level(logLevel); err != nil {
		bad("log-level", "%v", err)
	}
	if c.routeConfig != "" && len(errs) == 0 {
		if err := c.loadRouteConfig(); err != nil {
			errs = append(errs, fmt.Errorf("-route-config (%s): %w", envName("route-config"), err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// What idemhttp checks (durations, sizes, methods, the window) it
	// reports through middlewareOptions' panic, caught by build.
	return c, nil
}

// never are the response header fields -stored-headers refuses (idemhttp
// never stores them).
var never = map[string]bool{"Set-Cookie": true, "Set-Cookie2": true, "Authorization": true, "Proxy-Authorization": true,
	"Cookie": true, "Www-Authenticate": true, "Proxy-Authenticate": true, "Authentication-Info": true, "Proxy-Authentication-Info": true}

// timeBounds checks that every wait is bounded and that the bounds agree:
// a claim outlives the longest upstream wait even if its renewal fails,
// and the server does not cut a response the backend gives in time.
func (c *config) timeBounds(bad func(name, format string, args ...any)) {
	for _, b := range []struct {
		name string
		d    time.Duration
	}{{"upstream-timeout", c.upstreamTimeout}, {"read-timeout", c.readTimeout}, {"read-header-timeout", c.readHeaderTimeout},
		{"write-timeout", c.writeTimeout}, {"idle-timeout", c.idleTimeout}} {
		if b.d <= 0 {
			bad(b.name, "%v: every wait of the gateway is bounded; give a positive duration", b.d)
		}
	}
	if c.upstreamTimeout <= 0 {
		return
	}
	if lease := c.effectiveLease(); lease < c.upstreamTimeout {
		bad("lease", "%v is shorter than -upstream-timeout %v: if a renewal failed, another request could take the key over while the backend still runs the first (set -lease above -upstream-timeout)", lease, c.upstreamTimeout)
	}
	if c.ttl > 0 && c.ttl < c.upstreamTimeout {
		bad("ttl", "%v is shorter than -upstream-timeout %v: a claim is capped at the TTL", c.ttl, c.upstreamTimeout)
	}
	if c.deriveWindow > 0 && c.deriveWindow < c.upstreamTimeout {
		bad("derive-window", "%v is shorter than -upstream-timeout %v: a derived key's claim is capped at the window", c.deriveWindow, c.upstreamTimeout)
	}
	if need := c.readTimeout + c.wait + c.upstreamTimeout; c.writeTimeout > 0 && c.writeTimeout <= need {
		bad("write-timeout", "%v is not more than -read-timeout + -wait + -upstream-timeout (%v): the gateway would cut responses the backend gives in time", c.writeTimeout, need)
	}
	if c.shutdownTimeout < c.upstreamTimeout {
		bad("shutdown-timeout", "%v is shorter than -upstream-timeout %v: a shutdown would cut requests the backend is still running", c.shutdownTimeout, c.upstreamTimeout)
	}
}

func (c *config) level(s string) error {
	return c.logLevel.UnmarshalText([]byte(s))
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// redact hides a DSN's password (a URL's, or go-sql-driver/mysql's form's).
func redact(dsn string) string { return storeopen.Redact(dsn) }

// readFile reads a file named by a flag, naming the flag in the error.
func readFile(flagName, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-%s (%s): %w", flagName, envName(flagName), err)
	}
	return b, nil
}
