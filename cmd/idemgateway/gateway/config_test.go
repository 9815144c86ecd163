package gateway

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestConfigErrors: every bad setting is refused before anything starts,
// with an error that names the flag (and its variable) and what it wants.
func TestConfigErrors(t *testing.T) {
	ok := []string{"-upstream", "http://127.0.0.1:9000", "-store", "memory", "-single-tenant"}
	with := func(args ...string) []string { return append(append([]string{}, ok...), args...) }
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"nothing", nil, nil, []string{"-upstream (IDEMGW_UPSTREAM): required", "-store (IDEMGW_STORE): required", "no tenancy chosen"}},
		{"upstream not http", with("-upstream", "ftp://x"), nil, []string{`-upstream (IDEMGW_UPSTREAM): "ftp://x" is not an http:// or https:// URL with a host`}},
		{"upstream without host", with("-upstream", "http://"), nil, []string{"not an http:// or https:// URL with a host"}},
		{"store unknown, password hidden", with("-store", "mongodb://u:secret@h/db"), nil, []string{`-store (IDEMGW_STORE): "mongodb://u:xxxxx@h/db": want memory, postgres://`}},
		{"mysql without a database, password hidden", with("-store", "mysql://u:secret@h:3306/"), nil, []string{`-store (IDEMGW_STORE): "mysql://u:xxxxx@h:3306/": no database`}},
		{"mysql driver form, password hidden", with("-store", "mysql://u:secret@tcp(h:3306)/"), nil, []string{`-store (IDEMGW_STORE): "mysql://u:xxxxx@tcp(h:3306)/": no database`}},
		{"mysql-table without mysql", with("-mysql-table", "t"), nil, []string{"-mysql-table (IDEMGW_MYSQL_TABLE): given, but -store is not mysql://"}},
		{"two tenancies", with("-tenant-header", "X-Tenant"), nil, []string{"-tenant-header and -single-tenant: choose one tenancy"}},
		{"jwt flag without jwt", with("-jwt-issuer", "me"), nil, []string{"-jwt-issuer (IDEMGW_JWT_ISSUER): given, but the tenant does not come from a JWT"}},
		{"pg-table without postgres", with("-pg-table", "t"), nil, []string{"-pg-table (IDEMGW_PG_TABLE): given, but -store is not postgres://"}},
		{"migrate without postgres", with("-migrate"), nil, []string{"-migrate (IDEMGW_MIGRATE): given, but -store is not postgres:// or mysql://"}},
		{"redis-prefix without redis", with("-redis-prefix", "p:"), nil, []string{"-redis-prefix (IDEMGW_REDIS_PREFIX): given, but -store is not redis://"}},
		{"no routes", with("-routes", " , "), nil, []string{"-routes (IDEMGW_ROUTES): no route"}},
		{"no methods", with("-methods", ""), nil, []string{"-methods (IDEMGW_METHODS): no method"}},
		{"bad duration", with("-ttl", "soon"), nil, []string{`invalid value "soon" for flag -ttl`}},
		{"bad log level", with("-log-level", "loud"), nil, []string{"-log-level (IDEMGW_LOG_LEVEL)"}},
		{"stray argument", with("extra"), nil, []string{`unexpected arguments ["extra"]`}},
		{"bad env", ok, map[string]string{"IDEMGW_WAIT": "forever"}, []string{`IDEMGW_WAIT="forever" (flag -wait)`}},
		// Every wait is bounded, and the bounds agree (class 3).
		{"unbounded upstream", with("-upstream-timeout", "0"), nil, []string{"-upstream-timeout (IDEMGW_UPSTREAM_TIMEOUT): 0s: every wait of the gateway is bounded"}},
		{"unbounded body read", with("-read-timeout", "0"), nil, []string{"-read-timeout (IDEMGW_READ_TIMEOUT): 0s"}},
		{"unbounded write", with("-write-timeout", "0"), nil, []string{"-write-timeout (IDEMGW_WRITE_TIMEOUT): 0s"}},
		{"unbounded idle", with("-idle-timeout", "0"), nil, []string{"-idle-timeout (IDEMGW_IDLE_TIMEOUT): 0s"}},
		{"lease shorter than the upstream timeout", with("-lease", "10s", "-upstream-timeout", "20s"), nil, []string{"-lease (IDEMGW_LEASE): 10s is shorter than -upstream-timeout 20s"}},
		{"default lease shorter than the upstream timeout", with("-upstream-timeout", "1m", "-shutdown-timeout", "2m", "-write-timeout", "5m"), nil, []string{"-lease (IDEMGW_LEASE): 30s is shorter than -upstream-timeout 1m0s"}},
		{"ttl shorter than the upstream timeout", with("-ttl", "5s"), nil, []string{"-ttl (IDEMGW_TTL): 5s is shorter than -upstream-timeout 25s"}},
		{"window shorter than the upstream timeout", with("-derive-window", "10s"), nil, []string{"-derive-window (IDEMGW_DERIVE_WINDOW): 10s is shorter than -upstream-timeout 25s"}},
		{"write timeout cuts answers in time", with("-write-timeout", "40s"), nil, []string{"-write-timeout (IDEMGW_WRITE_TIMEOUT): 40s is not more than -read-timeout + -wait + -upstream-timeout (55s)"}},
		{"shutdown cuts the upstream", with("-shutdown-timeout", "5s"), nil, []string{"-shutdown-timeout (IDEMGW_SHUTDOWN_TIMEOUT): 5s is shorter than -upstream-timeout 25s"}},
		{"unknown outcome mode", with("-unknown-outcome", "retry"), nil, []string{`-unknown-outcome (IDEMGW_UNKNOWN_OUTCOME): "retry": want keep or release`}},
		// Settings that contradict each other.
		{"upstream is the gateway itself", with("-listen", ":9000"), nil, []string{`-upstream (IDEMGW_UPSTREAM): http://127.0.0.1:9000 is the gateway's own -listen ":9000"`}},
		{"upstream is the gateway itself, localhost", with("-listen", "127.0.0.1:8080", "-upstream", "http://localhost:8080/api"), nil, []string{"is the gateway's own -listen"}},
		{"upstream is the gateway itself, default port", with("-listen", "[::1]:80", "-upstream", "http://127.0.0.1"), nil, []string{"is the gateway's own -listen"}},
		// The OTLP export: a collector's base URL, an interval only with it.
		{"otlp endpoint not a URL", with("-otlp-endpoint", "collector:4318"), nil, []string{`-otlp-endpoint (IDEMGW_OTLP_ENDPOINT): "collector:4318" is not an http:// or https:// URL with a host`}},
		{"otlp endpoint grpc scheme", with("-otlp-endpoint", "grpc://c:4317"), nil, []string{"-otlp-endpoint (IDEMGW_OTLP_ENDPOINT)", "OTLP/HTTP"}},
		{"otlp endpoint with a signal path", with("-otlp-endpoint", "http://c:4318/v1/traces"), nil, []string{"give the collector's base URL"}},
		{"otlp endpoint with a query", with("-otlp-endpoint", "http://c:4318/?k=v"), nil, []string{"takes no user, query or fragment"}},
		{"otlp endpoint from env", ok, map[string]string{"IDEMGW_OTLP_ENDPOINT": "4318"}, []string{"-otlp-endpoint (IDEMGW_OTLP_ENDPOINT)"}},
		{"otlp interval without endpoint", with("-otlp-interval", "10s"), nil, []string{"-otlp-interval (IDEMGW_OTLP_INTERVAL): given, but -otlp-endpoint is not"}},
		{"otlp interval zero", with("-otlp-endpoint", "http://c:4318", "-otlp-interval", "0"), nil, []string{"-otlp-interval (IDEMGW_OTLP_INTERVAL): 0s: give a positive duration"}},
		// Set-Cookie is never replayed (class 4).
		{"stored Set-Cookie", with("-stored-headers", "Content-Type,set-cookie"), nil, []string{"-stored-headers (IDEMGW_STORED_HEADERS): set-cookie is never stored"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, &bytes.Buffer{})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestSelfUpstream: only an upstream that is certainly the gateway's own
// listener is refused; the same port on another host is another machine.
func TestSelfUpstream(t *testing.T) {
	for _, tc := range []struct {
		listen, upstream string
		self             bool
	}{
		{":8080", "http://127.0.0.1:8080", true},
		{":8080", "http://localhost:8080", true},
		{"0.0.0.0:8080", "http://[::1]:8080", true},
		{"127.0.0.1:80", "http://localhost", true},
		{"10.0.0.5:8080", "http://10.0.0.5:8080", true},
		{":8080", "http://backend:8080", false},
		{":8080", "http://127.0.0.1:9000", false},
		{"10.0.0.5:8080", "http://127.0.0.1:8080", false},
		{"127.0.0.1:0", "http://127.0.0.1:0", false},
		{":443", "http://127.0.0.1", false},
	} {
		u, err := url.Parse(tc.upstream)
		if err != nil {
			t.Fatal(err)
		}
		if got := selfUpstream(tc.listen, u); got != tc.self {
			t.Errorf("selfUpstream(%q, %q) = %v, want %v", tc.listen, tc.upstream, got, tc.self)
		}
	}
}

// TestConfigRefusedAtStart: what idemhttp, the mux or the files refuse is
// an error of run, naming the flag, before the gateway serves.
func TestConfigRefusedAtStart(t *testing.T) {
	ok := []string{"-listen", "127.0.0.1:0", "-upstream", "http://127.0.0.1:9000", "-store", "memory", "-single-tenant"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"window too long", []string{"-derive-window", "2m"}, "WithDerivedKey(2m0s): the window must be > 0 and at most 1m0s (MaxDerivedKeyWindow)"},
		{"negative window", []string{"-derive-window", "-1s"}, "WithDerivedKey(-1s)"},
		{"lease over ttl", []string{"-ttl", "1m", "-lease", "2m"}, "WithLease(2m0s) exceeds the TTL"},
		{"bad method", []string{"-methods", "po st"}, `WithMethods("po st"): not a method token`},
		{"bad route", []string{"-routes", "POST charges"}, `-routes (IDEMGW_ROUTES): pattern "POST charges"`},
		{"conflicting route", []string{"-routes", "GET /healthz"}, `pattern "GET /healthz"`},
		{"listen", []string{"-listen", "256.0.0.1:0"}, "-listen (IDEMGW_LISTEN)"},
		{"missing secret", []string{"-single-tenant=false", "-jwt-hmac-secret-file", "/nonexistent/secret"}, "-jwt-hmac-secret-file (IDEMGW_JWT_HMAC_SECRET_FILE): open /nonexistent/secret"},
		{"postgres unparsable", []string{"-store", "postgres://u@h:notaport/db"}, "-store (IDEMGW_STORE)"},
		{"pg-table invalid", []string{"-store", "postgres://u@127.0.0.1:1/db", "-pg-table", "a.b.c"}, "-pg-table (IDEMGW_PG_TABLE): pgstore: table name"},
		{"mysql-table invalid", []string{"-store", "mysql://u@127.0.0.1:1/db", "-mysql-table", "a.b.c"}, "-mysql-table (IDEMGW_MYSQL_TABLE): mysqlstore: table name"},
		{"redis-prefix invalid", []string{"-store", "redis://127.0.0.1:1/0", "-redis-prefix", "a{b"}, "-redis-prefix (IDEMGW_REDIS_PREFIX): redisstore: prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			err := run(context.Background(), append(append([]string{}, ok...), tc.args...), func(string) string { return "" }, &log, deps{}, func(string) {
				t.Error("the gateway started")
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

// TestConfigFromEnv: a flag's variable sets it; the command line wins.
func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		"IDEMGW_UPSTREAM": "http://backend:9000", "IDEMGW_STORE": "redis://r:6379/1", "IDEMGW_TENANT_HEADER": "X-Account",
		"IDEMGW_ROUTES": "POST /charges, /orders/{id}", "IDEMGW_WAIT": "5s", "IDEMGW_TTL": "1h",
		"IDEMGW_OTLP_ENDPOINT": "https://collector:4318", "IDEMGW_OTLP_INTERVAL": "15s",
	}
	c, err := parseConfig([]string{"-ttl", "2h"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.upstream.String() != "http://backend:9000" || c.storeKind != "redis" || c.tenantHeader != "X-Account" ||
		strings.Join(c.routes, "|") != "POST /charges|/orders/{id}" || c.wait != 5*time.Second || c.ttl != 2*time.Hour ||
		c.otlpEndpoint.String() != "https://collector:4318" || c.otlpInterval != 15*time.Second {
		t.Fatalf("config %+v", c)
	}
}

// TestHelp: -h is no error; it shows command lines that work as they are
// before the flags (each is parsed here), says what is required, and
// lists every flag with its variable under a heading, none left over;
// and the flags it lists are those of docs/GATEWAY.md's table.
func TestHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := parseConfig([]string{"-h"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	help := out.String()
	for _, w := range []string{
		"  idemgateway -upstream http://127.0.0.1:9000 -store memory -single-tenant\n",
		"Required: -upstream, -store, and one tenancy.",
		"Required:\n  -upstream URL",
		"Tenancy: exactly one of the first four is required:",
		"sizes are bytes", "default: 24h", "default: 1048576 bytes",
	} {
		if !strings.Contains(help, w) {
			t.Errorf("-h lacks %q:\n%s", w, help)
		}
	}
	if strings.Contains(help, "Other flags") {
		t.Errorf("a flag is in no group of helpGroups:\n%s", help)
	}
	// The examples come before the flags, and each parses.
	examples := 0
	lines := strings.Split(help, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "  idemgateway ") {
			continue
		}
		cmd := lines[i]
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
			i++
			cmd = strings.TrimSuffix(cmd, "\\") + lines[i]
		}
		if strings.Index(help, cmd[:20]) > strings.Index(help, "\n  -upstream") {
			t.Errorf("example after the flags: %s", cmd)
		}
		args := shellWords(strings.TrimPrefix(strings.TrimSpace(cmd), "idemgateway "))
		if _, err := parseConfig(args, func(string) string { return "" }, &bytes.Buffer{}); err != nil {
			t.Errorf("the example %q is refused: %v", cmd, err)
		}
		examples++
	}
	if examples < 2 {
		t.Errorf("%d example command lines, want a minimal one and a production one:\n%s", examples, help)
	}

	listed := map[string]bool{}
	flagLine := regexp.MustCompile(`^  -([a-z-]+)[ A-Z|a-z]*\[(IDEMGW_[A-Z_]+)\]`)
	for _, l := range lines {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			listed[m[1]] = true
			if m[2] != envName(m[1]) {
				t.Errorf("-%s listed with %s, want %s", m[1], m[2], envName(m[1]))
			}
		}
	}
	doc, err := os.ReadFile("../../../docs/GATEWAY.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for l := range strings.SplitSeq(string(doc), "\n") {
		if cells := strings.Split(l, "|"); strings.HasPrefix(l, "| `-") && len(cells) > 2 {
			for _, m := range regexp.MustCompile("`-([a-z-]+)").FindAllStringSubmatch(cells[1], -1) {
				documented[m[1]] = true
			}
		}
	}
	if len(listed) < 30 {
		t.Fatalf("-h lists %d flags:\n%s", len(listed), help)
	}
	for name := range listed {
		if !documented[name] {
			t.Errorf("-%s is in -h but not in docs/GATEWAY.md's table of flags", name)
		}
	}
	for name := range documented {
		if !listed[name] {
			t.Errorf("-%s is in docs/GATEWAY.md's table but not in -h", name)
		}
	}
}

// shellWords splits a command line as sh does for the examples: on
// blanks, single quotes keeping what they enclose.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quoted := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, in = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
