// Command idemgen writes idem_gen.go beside every package whose methods carry
// an //idem: annotation: a wrapper type whose annotated methods run at most
// once per key, through the idemgen runtime.
//
//	//go:generate go run github.com/idemgen/idemgen/cmd/idemgen
//
// or, with the tool directive of Go 1.24+ (go get -tool
// github.com/idemgen/idemgen/cmd/idemgen):
//
//	//go:generate go tool idemgen
//
// Run idemgen -h for the flags.
package main

import (
	"bytes"
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
outcome to retries. Packages are go list patterns (default ".", and "./..."
works). A package without annotations gets no file, and a stale idem_gen.go
there is removed.

An annotation is a line in a method's doc comment:

	//idem:key=order.ID+op ttl=155s final=ErrInsufficientFunds
	func (s *OrderService) Pay(ctx context.Context, order *Order, op string) (*Receipt, error)

	svc := NewIdempotentOrderService(&OrderService{}, idem.NewExecutor(memstore.New()))

Options: key, ttl, retries, timeout, backoff, downstream, margin, lease,
inflight, hash, final, op; //idem:defaults on a type applies to its methods.
The reference is ANNOTATIONS.md in the idemgen repository.

With go generate, in one file of the package:

	//go:generate go run github.com/idemgen/idemgen/cmd/idemgen

Flags:
`

const exitText = `
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
	check := fs.Bool("check", false, "write nothing; exit 1 and name every idem_gen.go that is stale, missing or extra")
	tags := fs.String("tags", "", "comma-separated build `tags` to load the packages with (idemgen is always set)")
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
		printErrors(stderr, wd, err)
		return exitFailed
	}
	changes, err := diff(files)
	if err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return exitFailed
	}
	if *check {
		for _, c := range changes {
			if c.state != unchanged {
				fmt.Fprintf(stderr, "%s: %s; run idemgen\n", shortPath(wd, c.file.Path), c.state)
			} else if *verbose {
				fmt.Fprintf(stderr, "%s: up to date\n", shortPath(wd, c.file.Path))
			}
		}
		if stale(changes) {
			return exitFailed
		}
		return exitOK
	}
	if err := commit(changes); err != nil {
		fmt.Fprintln(stderr, "idemgen:", err)
		return exitFailed
	}
	if *verbose {
		for _, c := range changes {
			fmt.Fprintf(stderr, "%s: %s\n", shortPath(wd, c.file.Path), c.state.done())
		}
	}
	return exitOK
}

// printErrors prints err one error per line, paths relative to wd, like go
// build.
func printErrors(w io.Writer, wd string, err error) {
	var list annotations.ErrorList
	if !errors.As(err, &list) {
		fmt.Fprintln(w, err)
		return
	}
	for _, e := range list {
		pos := e.Pos
		if filepath.IsAbs(pos.Filename) {
			pos.Filename = shortPath(wd, pos.Filename)
		}
		fmt.Fprintf(w, "%s: %s\n", pos, e.Msg)
	}
}

// shortPath returns path relative to wd when that is shorter (the go
// command's base.ShortPath).
func shortPath(wd, path string) string {
	if rel, err := filepath.Rel(wd, path); err == nil && len(rel) < len(path) {
		return rel
	}
	return path
}

type state int

const (
	unchanged state = iota
	missing         // to be written, no file yet
	outdated        // to be written over different bytes
	extra           // a generated file no annotated method needs any more
)

func (s state) String() string {
	return [...]string{"up to date", "missing", "stale", "extra (no annotated method needs it any more)"}[s]
}

func (s state) done() string {
	return [...]string{"unchanged", "written", "rewritten", "removed"}[s]
}

type change struct {
	file  generate.File
	state state
}

// diff compares the generated files with the disk.
func diff(files []generate.File) ([]change, error) {
	var changes []change
	for _, f := range files {
		old, err := os.ReadFile(f.Path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if !f.Delete {
				changes = append(changes, change{f, missing})
			}
		case err != nil:
			return nil, err
		case f.Delete:
			changes = append(changes, change{f, extra})
		case bytes.Equal(old, f.Content):
			changes = append(changes, change{f, unchanged})
		default:
			changes = append(changes, change{f, outdated})
		}
	}
	return changes, nil
}

func stale(changes []change) bool {
	for _, c := range changes {
		if c.state != unchanged {
			return true
		}
	}
	return false
}

// commit writes every changed file atomically: each goes to a temporary file
// in its directory first, and only when all are written are they renamed
// into place (then stale files removed). Unchanged files are not touched.
func commit(changes []change) (err error) {
	type pending struct{ tmp, path string }
	var renames []pending
	defer func() {
		if err != nil {
			for _, p := range renames {
				os.Remove(p.tmp)
			}
		}
	}()
	for _, c := range changes {
		if c.state != missing && c.state != outdated {
			continue
		}
		tmp, err := writeTemp(c.file.Path, c.file.Content)
		if err != nil {
			return err
		}
		renames = append(renames, pending{tmp, c.file.Path})
	}
	for i, p := range renames {
		if err := os.Rename(p.tmp, p.path); err != nil {
			renames = renames[i:]
			return err
		}
	}
	renames = nil
	for _, c := range changes {
		if c.state == extra {
			if err := os.Remove(c.file.Path); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeTemp(path string, content []byte) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(content)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(f.Name(), 0o644)); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
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
