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
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/idemgen/idemgen/analysis/idemvet"
)

func main() { singlechecker.Main(idemvet.Analyzer) }
