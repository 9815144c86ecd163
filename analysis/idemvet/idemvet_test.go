package idemvet_test

import (
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemgen/idemgen/analysis/idemvet"
)

// testdata is a module (go.mod, replace of this repository) so that its
// services import the real runtime and carry files idemgen generated.
func testdata(t *testing.T) string {
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestAnnotationErrors: idemgen's errors, at its positions with its text,
// in a plain package and in one with build constraints (whose other
// configuration's error is reported at the package clause).
func TestAnnotationErrors(t *testing.T) {
	analysistest.Run(t, testdata(t), idemvet.Analyzer, "example.com/vet/badann", "example.com/vet/nightly")
}

// TestStale: a stale idem_gen.go gets the diff and a fix that rewrites it
// as idemgen would (stale/idem_gen.go.golden is idemgen's output); a
// missing one is reported at the first annotation.
func TestStale(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, testdata(t), idemvet.Analyzer, "example.com/vet/stale")
	analysistest.Run(t, testdata(t), idemvet.Analyzer, "example.com/vet/missing")
}

// TestBypass: calls of billing's annotated Pay from another package, known
// by the fact billing's pass exported; the fix of w.Service.Pay is w.Pay.
func TestBypass(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, testdata(t), idemvet.Analyzer, "example.com/vet/handler")
}

// TestWiring: executors and wrappers that compile but cannot work.
func TestWiring(t *testing.T) {
	analysistest.Run(t, testdata(t), idemvet.Analyzer, "example.com/vet/wiring")
}
