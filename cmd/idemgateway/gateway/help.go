package gateway

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// helpGroup is a heading of -h and the flags under it, each with the
// placeholder of its value.
type helpGroup struct {
	title string
	flags [][2]string // name, placeholder ("" for a boolean)
}

// helpGroups orders -h: what is required first, then by what an operator
// tunes. A flag in no group is listed under "Other flags" (TestHelp
// refuses that).
var helpGroups = []helpGroup{
	{"Required", [][2]string{{"upstream", "URL"}, {"store", "DSN"}}},
	{"Tenancy: exactly one of the first four is required", [][2]string{
		{"tenant-header", "NAME"}, {"jwt-hmac-secret-file", "FILE"}, {"jwt-public-key-file", "FILE"}, {"single-tenant", ""},
		{"jwt-claim", "NAME"}, {"jwt-issuer", "ISS"}, {"jwt-audience", "AUD"}}},
	{"Which requests are keyed", [][2]string{{"routes", "LIST"}, {"methods", "LIST"}, {"route-config", "FILE"}, {"derive-window", "DURATION"}}},
	{"Stored responses", [][2]string{{"ttl", "DURATION"}, {"lease", "DURATION"}, {"wait", "DURATION"}, {"max-body", "BYTES"},
		{"max-response", "BYTES"}, {"stored-headers", "LIST"}, {"unknown-outcome", "keep|release"}}},
	{"Time bounds (startup checks that they agree)", [][2]string{{"upstream-timeout", "DURATION"}, {"read-timeout", "DURATION"},
		{"read-header-timeout", "DURATION"}, {"write-timeout", "DURATION"}, {"idle-timeout", "DURATION"}, {"shutdown-timeout", "DURATION"}}},
	{"Store options", [][2]string{{"pg-table", "NAME"}, {"mysql-table", "NAME"}, {"migrate", ""}, {"redis-prefix", "PREFIX"}}},
	{"Serving and observing", [][2]string{{"listen", "ADDR"}, {"log-level", "LEVEL"}, {"metrics-path", "PATH"},
		{"otlp-endpoint", "URL"}, {"otlp-interval", "DURATION"}}},
}

// helpIntro is what -h prints before the flags: what the command does,
// a command line that works as it is, and the rules every flag follows.
const helpIntro = `idemgateway: a reverse proxy in front of a backend you cannot change. A request
with an Idempotency-Key header runs on the backend once; its response is stored
and replayed to every retry with the same key (marked Idempotent-Replayed: true).

Try it (an in-memory store, one key space for every client):
  idemgateway -upstream http://127.0.0.1:9000 -store memory -single-tenant
  curl -i -X POST -H 'Idempotency-Key: 4f6c0b1e-try-it' localhost:8080/charges

In production (a shared store; the tenant from the authenticating proxy's header):
  idemgateway -upstream http://billing:9000 -store postgres://gw@db/gw -migrate \
    -tenant-header X-Tenant-Id -routes 'POST /charges,POST /orders' \
    -metrics-path /metrics -otlp-endpoint http://otel-collector:4318

Required: -upstream, -store, and one tenancy. Every flag may be given as the
environment variable in brackets instead; the command line wins. Durations are
Go durations (300ms, 30s, 5m, 24h); sizes are bytes. A bad or contradictory
setting stops the command before it serves (exit 2). More: docs/GATEWAY.md.
`

// printUsage prints -h: helpIntro, then every flag of fs by group, each
// with its variable, its default and what it does.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, helpIntro)
	listed := map[string]bool{}
	for _, g := range helpGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, nf := range g.flags {
			if f := fs.Lookup(nf[0]); f != nil {
				printFlag(w, f, nf[1])
				listed[f.Name] = true
			}
		}
	}
	var other []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			other = append(other, f)
		}
	})
	if len(other) > 0 {
		fmt.Fprintf(w, "\nOther flags:\n")
		for _, f := range other {
			printFlag(w, f, "VALUE")
		}
	}
}

func printFlag(w io.Writer, f *flag.Flag, placeholder string) {
	head := "  -" + f.Name
	if placeholder != "" {
		head += " " + placeholder
	}
	fmt.Fprintf(w, "%-36s [%s]%s\n", head, envName(f.Name), defaultText(f))
	fmt.Fprintf(w, "      %s\n", f.Usage)
}

// defaultText is a flag's default as -h shows it: durations short (24h,
// not 24h0m0s), sizes with their unit, nothing for an empty one.
func defaultText(f *flag.Flag) string {
	v := f.DefValue
	switch {
	case f.Name == "upstream" || f.Name == "store":
		return "  required"
	case v == "" || v == "0" || v == "0s":
		return ""
	case v == "false":
		return "  default: off"
	}
	if d, err := time.ParseDuration(v); err == nil && strings.HasSuffix(v, "s") {
		v = shortDuration(d)
	} else if f.Name == "max-body" || f.Name == "max-response" {
		v += " bytes"
	}
	return "  default: " + v
}

// shortDuration is d without the zero minutes and seconds that
// Duration.String adds: 24h, 2m, 90s as 1m30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
