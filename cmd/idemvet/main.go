// Command idemvet runs the idemvet analyzer (package
// github.com/idemgen/idemgen/analysis/idemvet): idemgen's annotation errors,
// stale generated files, calls that bypass a generated wrapper, and
// executors or wrappers that cannot work.
//
// Standalone, on package patterns (for CI scripts; -fix applies the
// suggested fixes, -diff prints them):
//
//	go tool idemvet ./...
//
// With -fix, idemvet first rewrites the stale, missing and extra generated
// files of the patterns as idemgen would (analysis drivers never apply a
// fix to a generated file, so the stale file's suggested fix is applied
// here, by the generator itself), then applies the other fixes. With -fix
// -diff it prints what it would write instead.
//
// Through go vet, which runs it once per package with the go command's
// build cache (the unitchecker protocol; singlechecker.Main answers both):
//
//	go vet -vettool=$(go tool -n idemvet) ./...
//
// Install it as a tool of your module first:
//
//	go get -tool github.com/idemgen/idemgen/cmd/idemvet
//
// docs/IDEMVET.md in the idemgen repository has the golangci-lint plugin
// and the editor setup.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/idemgen/idemgen/analysis/idemvet"
	"github.com/idemgen/idemgen/internal/generate"
)

func main() {
	if fix, diff, patterns := fixArgs(os.Args[1:]); fix {
		if err := regenerate(context.Background(), os.Stdout, os.Stderr, patterns, diff); err != nil {
			fmt.Fprintln(os.Stderr, "idemvet:", err)
			os.Exit(1)
		}
	}
	// go vet -vettool passes one configuration file per package; on a
	// package that does not type-check, unitchecker never runs the
	// analyzer: report a stale generated file first.
	if n := len(os.Args); n >= 2 && strings.HasSuffix(os.Args[n-1], ".cfg") {
		idemvet.StaleUnderVet(context.Background(), os.Args[n-1], os.Stderr)
	}
	singlechecker.Main(idemvet.Analyzer)
}

// valueFlags are the driver's flags that take a separate value
// (-name value); every other flag is boolean or written -name=value.
var valueFlags = map[string]bool{"c": true, "cpuprofile": true, "memprofile": true, "trace": true, "debug": true}

// fixArgs reads the driver's command line for -fix and -diff and the
// package patterns. go vet's unitchecker protocol (one argument, a .cfg
// file) is not a -fix run.
func fixArgs(args []string) (fix, diff bool, patterns []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			patterns = append(patterns, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") {
			patterns = append(patterns, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		on := !hasValue || value == "true" || value == "1"
		switch {
		case name == "fix":
			fix = on
		case name == "diff":
			diff = on
		case valueFlags[name] && !hasValue:
			i++
		}
	}
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	return fix, diff, patterns
}

// regenerate writes (or, with diff, prints) what idemgen would change in
// the generated files of patterns. Annotation errors are left to the
// analyzer's run that follows, which reports them at their positions.
func regenerate(ctx context.Context, stdout, stderr io.Writer, patterns []string, diff bool) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	files, err := generate.Generate(ctx, generate.Config{Dir: wd, Patterns: patterns})
	if err != nil {
		return nil // the analyzer reports them
	}
	changes, err := generate.Compare(files)
	if err != nil {
		return err
	}
	if diff {
		for _, c := range changes {
			if c.State != generate.Unchanged {
				if err := c.WriteDiff(stdout, wd); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := generate.Commit(changes); err != nil {
		return err
	}
	for _, c := range changes {
		if c.State != generate.Unchanged {
			fmt.Fprintf(stderr, "idemvet: %s: %s as idemgen would\n", generate.ShortPath(wd, c.File.Path), c.State.Done())
		}
	}
	return nil
}
