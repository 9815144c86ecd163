// Package idemctl is the command idemctl (cmd/idemctl, and the SQLite
// build in runtime/sqlitestore/cmd/idemctl): look up, list, count and
// forget the idempotency records of a store given by its DSN, which
// internal/storeopen opens.
package idemctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"text/tabwriter"
	"time"

	"github.com/idemgen/idemgen/internal/storeopen"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

const usage = `usage: idemctl [global flags] COMMAND [flags] [args]   (flags before or after the command)

global flags:
  --dsn DSN        the store (or $IDEM_DSN): postgres://…, redis://… (redis-cluster://host:port?addr=host2:port2),
                   mysql://user:pass@host:port/db (or mysql://user:pass@tcp(host:port)/db, go-sql-driver's form), sqlite:PATH
  --tenant T       confine every command to tenant T's records: another tenant's record is "no live record"
  --json           print JSON
  --table T, --partitions D, --prefix P   the store's table, partition interval, key prefix

commands:
  get KEYHEX                       one record by its hex ID
  get --op OP PART...              one record by the key a caller builds (idem.NewKey(tenant, OP, PART...))
  get --op 'METHOD /route' KEY     one record idemhttp stored for a request: the tenant (--tenant) the
                                   middleware's WithTenant named, the operation ("POST /charges": the
                                   method and the route pattern, or the path without one) and the
                                   Idempotency-Key (--http says so for any other operation name)
  list  [--op OP] [--status S] [--max-age D] [--min-age D] [--limit N] [--cursor C] [--all]
  stuck [--op OP] [--limit N] [--cursor C] [--all]   PROCESSING records past their lease
  forget KEYHEX --token N --status S [--force] [--by WHO] [--reason R]
                 forget the version that get showed, so that the next call runs again
  stats [--op OP]                  counts by operation and status
`

// globals are the flags every command takes, before or after its name.
type globals struct {
	dsn    string
	json   bool
	so     storeopen.Options
	tenant tenantFlag
}

// tenantFlag is --tenant, and whether it was given (--tenant "" names the
// single-tenant key space).
type tenantFlag struct {
	name string
	set  bool
}

func (t *tenantFlag) String() string { return t.name }

func (t *tenantFlag) Set(s string) error {
	t.name, t.set = s, true
	return nil
}

// register adds the global flags to f, bound to g: the values already
// parsed are their defaults.
func (g *globals) register(f *flag.FlagSet) {
	f.StringVar(&g.dsn, "dsn", g.dsn, "the store's DSN")
	f.BoolVar(&g.json, "json", g.json, "print JSON")
	f.Var(&g.tenant, "tenant", "confine the command to this tenant's records")
	f.StringVar(&g.so.Table, "table", g.so.Table, "pgstore, mysqlstore: the records' table (default idem_records)")
	f.DurationVar(&g.so.Partitions, "partitions", g.so.Partitions, "pgstore: the store's WithPartitions interval, when partitioned")
	f.StringVar(&g.so.Prefix, "prefix", g.so.Prefix, "redisstore: the records' key prefix (default idem:)")
}

// openError is a store that could not be opened: a usage error (exit 2).
type openError struct{ err error }

func (e openError) Error() string { return e.err.Error() }

// Run runs the command line args (without the program name) and returns
// the exit status: 0, 1 for an error, 2 for a usage error.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, openers storeopen.Openers) int {
	c := &cli{ctx: ctx, out: stdout, errw: stderr, openers: openers, g: globals{dsn: os.Getenv("IDEM_DSN")}}
	g := flag.NewFlagSet("idemctl", flag.ContinueOnError)
	g.SetOutput(stderr)
	g.Usage = func() { fmt.Fprint(stderr, usage) }
	c.g.register(g)
	if err := g.Parse(args); err != nil {
		return 2
	}
	if g.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := g.Arg(0), g.Args()[1:]
	run, ok := map[string]func([]string) error{"get": c.get, "list": c.list, "stuck": c.stuck, "forget": c.forget, "stats": c.stats}[cmd]
	if !ok {
		fmt.Fprintf(stderr, "idemctl: unknown command %q\n%s", cmd, usage)
		return 2
	}
	err := run(rest)
	if c.close != nil {
		c.close()
	}
	var oe openError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &oe):
		fmt.Fprintf(stderr, "idemctl: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "idemctl: %s: %v\n", cmd, err)
	if errors.Is(err, idem.ErrStoreSchema) {
		fmt.Fprintln(stderr, "idemctl: the store's tables are missing or outdated: run the service's Migrate (pgstore, mysqlstore: (*Store).Migrate or their migration files; sqlitestore: (*Store).Migrate), or check --table")
	}
	return 1
}

var errUsage = errors.New("usage")

type cli struct {
	ctx     context.Context
	out     io.Writer
	errw    io.Writer
	openers storeopen.Openers
	g       globals
	close   func()
}

// admin opens the store of --dsn, confined to --tenant when one is named.
func (c *cli) admin() (idem.AdminStore, error) {
	s, closeStore, err := storeopen.Open(c.ctx, c.g.dsn, c.g.so, c.openers)
	if err != nil {
		return nil, openError{err}
	}
	c.close = closeStore
	if c.g.tenant.name != "" {
		return idemadmin.Confine(s, c.g.tenant.name), nil
	}
	return s, nil
}

func (c *cli) flags(name string) *flag.FlagSet {
	f := flag.NewFlagSet("idemctl "+name, flag.ContinueOnError)
	f.SetOutput(c.errw)
	c.g.register(f)
	return f
}

func (c *cli) parse(f *flag.FlagSet, args []string) error {
	// Flags and positional arguments in any order.
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			return errUsage
		}
		if f.NArg() == 0 {
			break
		}
		pos = append(pos, f.Arg(0))
		args = f.Args()[1:]
	}
	return f.Parse(append([]string{"--"}, pos...))
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// httpOp matches the operation idemhttp names a request by: its method
// and its route pattern or path ("POST /charges").
var httpOp = regexp.MustCompile(`^[A-Z]+ /`)

// lookup finds the record get names: one hex ID; or --op and the key's
// parts, in --tenant (confined when one is named); or, for an HTTP
// operation (--http, or an operation named as idemhttp names one), the key
// idemhttp built from the tenant, the operation and the Idempotency-Key.
func (c *cli) lookup(s idem.AdminStore, f *flag.FlagSet, op string, http bool) (idem.Entry, error) {
	tenant := c.g.tenant.name
	if op == "" {
		if f.NArg() != 1 || http {
			return idem.Entry{}, errors.New("give the key's hex ID, or --op (and --tenant) and the key's parts")
		}
		k, err := idem.KeyFromHex(f.Arg(0))
		if err != nil {
			return idem.Entry{}, err
		}
		return s.Lookup(c.ctx, k)
	}
	if f.NArg() == 0 {
		return idem.Entry{}, errors.New("--op given: the key's parts follow, in order")
	}
	var candidates [][]string
	if http || httpOp.MatchString(op) {
		if f.NArg() != 1 {
			return idem.Entry{}, errors.New("an HTTP operation: give the request's Idempotency-Key (one argument)")
		}
		key, err := idemhttp.ParseKey(f.Arg(0))
		if err != nil {
			return idem.Entry{}, fmt.Errorf("the Idempotency-Key: %w", err)
		}
		candidates = HTTPKeyParts(tenant, key)
	} else {
		candidates = [][]string{f.Args()}
	}
	var first error
	for _, parts := range candidates {
		var e idem.Entry
		var err error
		if cs, ok := s.(*idemadmin.Confined); ok {
			e, err = cs.LookupParts(c.ctx, op, parts...)
		} else {
			var k idem.Key
			if k, err = idem.NewKey(tenant, op, parts...); err == nil {
				e, err = s.Lookup(c.ctx, k)
			}
		}
		if !errors.Is(err, idem.ErrNotFound) {
			return e, err
		}
		if first == nil {
			first = err
		}
	}
	return idem.Entry{}, first
}

// HTTPKeyParts returns the key parts under which runtime/idemhttp may have
// stored the record of a request of tenant with Idempotency-Key key (after
// idemhttp.ParseKey), in the order to try them; the key's tenant is tenant
// and its operation the middleware's (the request's method and route). The
// middleware adds the tenant its WithTenant function named as the key's
// first part (idem.KeyParts.Tenant) and the key after it: under an executor
// that names no tenant of its own (SingleTenant, no door's tenant in the
// context) the first part becomes the key's tenant, leaving the key alone;
// under an executor whose tenant is the same one (the door's tenant in the
// context, or its own WithTenant) both parts stay. Under SingleTenant
// middleware (tenant "") the key is the only part.
// TestHTTPRecord checks both against records idemhttp stored.
func HTTPKeyParts(tenant, key string) [][]string {
	if tenant == "" {
		return [][]string{{key}}
	}
	return [][]string{{key}, {tenant, key}}
}

func (c *cli) get(args []string) error {
	f := c.flags("get")
	op := f.String("op", "", "the key's operation: the parts follow")
	http := f.Bool("http", false, "the record idemhttp stored: --op is the request's method and route, the argument its Idempotency-Key")
	if err := c.parse(f, args); err != nil {
		return err
	}
	s, err := c.admin()
	if err != nil {
		return err
	}
	e, err := c.lookup(s, f, *op, *http)
	if err != nil {
		if _, confined := s.(*idemadmin.Confined); confined && *op == "" && errors.Is(err, idem.ErrNotFound) {
			// Said of every such answer, found or not: it tells nothing of the record.
			err = fmt.Errorf("%w (confined by --tenant, a record is found by its hex ID only where its store keeps its tenant, not on Redis: give --op and the key's parts there)", err)
		}
		return err
	}
	if c.g.json {
		return c.printJSON(idemadmin.View(e))
	}
	v := idemadmin.View(e)
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	row := func(name, val string) {
		if val != "" {
			fmt.Fprintf(tw, "%s\t%s\n", name, val)
		}
	}
	row("key", v.Key)
	row("tenant", v.Tenant)
	row("op", v.Op)
	row("text", v.Text)
	status := v.Status
	if v.Stuck {
		status += " (stuck: lease lapsed)"
	}
	row("status", status)
	row("token", fmt.Sprint(uint64(v.Token)))
	row("fingerprint", v.Fingerprint)
	row("scheme", fmt.Sprint(v.Scheme))
	if v.Created != nil {
		row("created", stamp(*v.Created))
	}
	row("expires", stamp(v.Expires))
	if v.LeaseUntil != nil {
		row("lease until", stamp(*v.LeaseUntil)+" ("+v.LeaseLeft+" left)")
	}
	if o := v.Outcome; o != nil {
		row("body", string(o.Body)+o.BodyText+o.BodyHex)
		row("error code", o.ErrCode)
		row("error message", o.ErrMessage)
		if g := o.Origin; g != nil {
			sampled := "sampled"
			if !g.Sampled {
				sampled = "not sampled"
			}
			row("origin", "trace "+g.Trace+" span "+g.Span+" ("+sampled+")")
			row("traceparent", g.Traceparent)
		}
		meta := o.MetaHex
		if o.MetaError != "" {
			meta += " (" + o.MetaError + ")"
		}
		row("meta (hex)", meta)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "\nto forget this version: idemctl forget %s --token %d --status %s --reason '…'\n", v.Key, uint64(v.Token), v.Status)
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") }

func (c *cli) listFlags(name string, stuck bool) (*flag.FlagSet, *idem.ListQuery, *string, *bool) {
	f := c.flags(name)
	q := &idem.ListQuery{Stuck: stuck}
	f.StringVar(&q.Op, "op", "", "only this operation's records")
	status := f.String("status", "", "only this status: PROCESSING, SUCCEEDED, FAILED_FINAL")
	if !stuck {
		f.DurationVar(&q.MaxAge, "max-age", 0, "only records created at most this long ago")
		f.DurationVar(&q.MinAge, "min-age", 0, "only records created at least this long ago")
	}
	f.IntVar(&q.Limit, "limit", idem.DefaultListLimit, "records per page")
	f.StringVar(&q.Cursor, "cursor", "", "go on from a page's next cursor")
	all := f.Bool("all", false, "every page, not only the first")
	return f, q, status, all
}

func (c *cli) list(args []string) error  { return c.listing("list", args, false) }
func (c *cli) stuck(args []string) error { return c.listing("stuck", args, true) }

func (c *cli) listing(name string, args []string, stuck bool) error {
	f, q, status, all := c.listFlags(name, stuck)
	if err := c.parse(f, args); err != nil {
		return err
	}
	if c.g.tenant.set {
		q.Tenant, q.ByTenant = c.g.tenant.name, true
	}
	st, ok := idemadmin.ParseStatus(*status)
	if !ok {
		return fmt.Errorf("--status %q: PROCESSING, SUCCEEDED or FAILED_FINAL", *status)
	}
	q.Status = st
	s, err := c.admin()
	if err != nil {
		return err
	}
	var entries []idem.Entry
	next := ""
	for {
		p, err := s.List(c.ctx, *q)
		if err != nil {
			return err
		}
		entries, next = append(entries, p.Entries...), p.Next
		if !*all || next == "" {
			break
		}
		q.Cursor = next
	}
	if c.g.json {
		return c.printJSON(idemadmin.ViewPage(idem.Page{Entries: entries, Next: next}))
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTENANT\tOP\tTEXT\tSTATUS\tTOKEN\tCREATED\tEXPIRES\tLEASE")
	for _, e := range entries {
		v := idemadmin.View(e)
		created, lease := "-", "-"
		if v.Created != nil {
			created = stamp(*v.Created)
		}
		if v.LeaseUntil != nil {
			lease = v.LeaseLeft + " left"
			if v.Stuck {
				lease = "lapsed at " + stamp(*v.LeaseUntil)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", v.Key, dash(v.Tenant), dash(v.Op), dash(v.Text), v.Status,
			uint64(v.Token), created, stamp(v.Expires), lease)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%d records", len(entries))
	if next != "" {
		fmt.Fprintf(c.out, "; more: --cursor %s", next)
	}
	fmt.Fprintln(c.out)
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) forget(args []string) error {
	f := c.flags("forget")
	token := f.Uint64("token", 0, "the token get showed (required)")
	status := f.String("status", "", "the status get showed (required)")
	force := f.Bool("force", false, "forget a PROCESSING record whose lease is live (its worker may still be running)")
	by := f.String("by", defaultBy(), "who asks, for the audit line")
	reason := f.String("reason", "", "why, for the audit line")
	if err := c.parse(f, args); err != nil {
		return err
	}
	if f.NArg() != 1 {
		return errors.New("give the key's hex ID (idemctl get shows it)")
	}
	k, err := idem.KeyFromHex(f.Arg(0))
	if err != nil {
		return err
	}
	st, ok := idemadmin.ParseStatus(*status)
	if !ok || st == 0 || *token == 0 {
		return errors.New("--token and --status of the version to forget are required: run idemctl get first")
	}
	s, err := c.admin()
	if err != nil {
		return err
	}
	a, err := idem.NewAdmin(s, idem.WithAdminLogger(slog.New(slog.NewTextHandler(c.errw, nil))))
	if err != nil {
		return err
	}
	if err := a.Forget(c.ctx, idem.ForgetRequest{Key: k, Token: idem.Token(*token), Status: st, Force: *force, By: *by, Reason: *reason}); err != nil {
		if _, confined := s.(*idemadmin.Confined); confined && errors.Is(err, idem.ErrNotFound) {
			err = fmt.Errorf("%w (confined by --tenant, a record is forgotten only where its store keeps its tenant, not on Redis)", err)
		}
		return err
	}
	if c.g.json {
		return c.printJSON(map[string]string{"forgotten": k.Hex()})
	}
	fmt.Fprintf(c.out, "forgotten: %s (the next call with this key runs again)\n", k.Hex())
	return nil
}

func (c *cli) stats(args []string) error {
	f := c.flags("stats")
	op := f.String("op", "", "only this operation")
	if err := c.parse(f, args); err != nil {
		return err
	}
	q := idem.StatsQuery{Op: *op}
	if c.g.tenant.set {
		q.Tenant, q.ByTenant = c.g.tenant.name, true
	}
	s, err := c.admin()
	if err != nil {
		return err
	}
	st, err := s.Stats(c.ctx, q)
	if err != nil {
		return err
	}
	if c.g.json {
		return c.printJSON(idemadmin.ViewStats(st))
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OP\tSTATUS\tCOUNT\t")
	var total int64
	for _, s := range st {
		status := s.Status.String()
		if s.Stuck {
			status += " (stuck)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t\n", dash(s.Op), status, s.Count)
		total += s.Count
	}
	fmt.Fprintf(tw, "\ttotal\t%d\t\n", total)
	return tw.Flush()
}

// defaultBy names the operator: $USER@host.
func defaultBy() string {
	host, _ := os.Hostname()
	user := os.Getenv("USER")
	if user == "" {
		user = "unknown"
	}
	return user + "@" + host
}

// Main runs idemctl on the process's arguments with openers and exits with
// its status; an interrupt cancels the store's calls.
func Main(openers storeopen.Openers) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr, openers)
	stop()
	os.Exit(code)
}
