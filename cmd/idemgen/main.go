package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/idemgen/idemgen/annotations"
	"github.com/idemgen/idemgen/internal/generate"
)

const modulePath = "github.com/idemgen/idemgen"

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1 // annotation, type or load errors, or -check found drift
	exitUsage  = 2
)

const usageText = `usage: idemgen [flags] [packages]

idemgen writes idem_gen.go beside every package whose methods carry an
//idem: annotation: a type Idempotent<Type>, made by NewIdempotent<Type>,
whose annotated methods run at most once per key, replaying the stored
outcome to retries. Install it as a tool of your module (Go 1.24+; this
survives go mod tidy):

	go get -tool github.com/idemgen/idemgen/cmd/idemgen

and add, in one file of the package:

	//go:generate go tool idemgen

(The go run form, //go:generate go run github.com/idemgen/idemgen/cmd/idemgen,
needs go get github.com/idemgen/idemgen/cmd/idemgen, and a tools/tools.go
file that imports the command to survive go mod tidy.)

Packages are go list patterns (default ".", and "./..." works). Annotated
methods under a build constraint (//go:build linux, svc_linux.go) go to
idem_gen_<constraint>.go, which carries it; idemgen finds them in every build
configuration, without -tags. A generated file that no annotated method needs
any more is removed.

An annotation is a line in a method's doc comment:

	//idem:key=order.ID+op ttl=155s final=ErrInsufficientFunds
	func (s *OrderService) Pay(ctx context.Context, order *Order, op string) (*Receipt, error)

	ex := idem.NewExecutor(memstore.New(), idem.WithTenant(tenantOf)) // or idem.SingleTenant()
	svc := NewIdempotentOrderService(&OrderService{}, ex)

Options: key, ttl, retries, timeout, backoff, downstream, margin, lease,
inflight, hash, final, op, codec, renew; //idem:defaults on a type applies
to its methods. The reference is docs/ANNOTATIONS.md in the idemgen repository.

Flags:
`

const exitText = `
Deploy events (a key expression, an op or a final= sentinel that differs
from the committed generated file's) are printed as warnings, at the
annotation, with the way out; they do not change the exit status.

Exit status: 0 on success; 1 on annotation, type or load errors (printed as
file:line:col: message, and no file is written) or when -check finds a file
stale, missing or extra; 2 on a usage error.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is idemgen with its arguments and output streams; it returns the exit
// status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("idemgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.Bool("check", false, "write nothing; exit 1 and name every generated file that is stale, missing or extra")
	showDiff := fs.Bool("diff", false, "with -check: also print a unified diff of what a run would change to standard output (implies -check)")
	tags := fs.String("tags", "", "comma-separated build `tags` set in every configuration idemgen loads (idemgen is always set; the tags the package's files mention are tried with and without)")
	verbose := fs.Bool("v", false, "print what is written, removed or unchanged")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), exitText)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *version {
		fmt.Fprintln(stdout, "idemgen", buildVersion())
		return exitOK
	}
	var tagList []string
	for t := range strings.SplitSeq(*tags, ",") {
		if t = strings.TrimSpace(t); t != "" {
			tagList = append(tagList, t)
		}
	}
	for _, p := range fs.Args() {
		if strings.HasPrefix(p, "-") {
			fmt.Fprintf(stderr, "idemgen: flag %s after the packages: flags come first\n", p)
			fs.Usage()
			return exitUsage
		}
	}

	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return exitFailed
	}
	files, err := generate.Generate(ctx, generate.Config{Dir: wd, Patterns: fs.Args(), Tags: tagList})
	if err != nil {
		printErrors(stderr, err)
		return exitFailed
	}
	for _, f := range files {
		printWarnings(stderr, f.Warnings)
	}
	changes, err := generate.Compare(files)
	if err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return exitFailed
	}
	if *check || *showDiff {
		for _, c := range changes {
			if c.State != generate.Unchanged {
				fmt.Fprintf(stderr, "%s: %s; run idemgen\n", generate.ModuleRelative(c.File.Path), c.State)
				if *showDiff {
					if err := c.WriteDiff(stdout, wd); err != nil {
						fmt.Fprintln(stderr, "idemgen:", err)
						return exitFailed
					}
				}
			} else if *verbose {
				fmt.Fprintf(stderr, "%s: up to date\n", generate.ModuleRelative(c.File.Path))
			}
		}
		if generate.Stale(changes) {
			return exitFailed
		}
		return exitOK
	}
	if err := generate.Commit(changes); err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return exitFailed
	}
	if *verbose {
		for _, c := range changes {
			fmt.Fprintf(stderr, "%s: %s\n", generate.ModuleRelative(c.File.Path), c.State.Done())
		}
	}
	return exitOK
}

// printErrors prints err one error per line, paths relative to the module
// root (generate.ModuleRelative), as idemvet's under go vet: one form
// whether idemgen runs from the root or, under go generate, in the
// package's directory.
func printErrors(w io.Writer, err error) {
	var list annotations.ErrorList
	if !errors.As(err, &list) {
		fmt.Fprintln(w, err)
		return
	}
	for _, e := range list {
		pos := e.Pos
		if filepath.IsAbs(pos.Filename) {
			pos.Filename = generate.ModuleRelative(pos.Filename)
		}
		fmt.Fprintf(w, "%s: %s\n", pos, e.Msg)
	}
}

// printWarnings prints the deploy events of a generated file (see
// generate.File.Warnings) as errors are printed, with "warning: ".
func printWarnings(w io.Writer, list annotations.ErrorList) {
	for _, e := range list {
		pos := e.Pos
		if filepath.IsAbs(pos.Filename) {
			pos.Filename = generate.ModuleRelative(pos.Filename)
		}
		fmt.Fprintf(w, "%s: warning: %s\n", pos, e.Msg)
	}
}

// buildVersion is the version of the idemgen module this binary was built
// from: the main module's when run from a checkout or with go run pkg@v,
// the dependency's when run with go tool from another module.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := info.Main.Version
	if info.Main.Path != modulePath {
		v = "(unknown)"
		for _, d := range info.Deps {
			if d.Path == modulePath {
				v = d.Version
				if d.Replace != nil {
					v += " => " + d.Replace.Path + " " + d.Replace.Version
				}
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return v + " " + info.GoVersion
}
