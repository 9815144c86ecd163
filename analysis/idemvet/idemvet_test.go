package idemvet_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/idemgen/idemgen/analysis/idemvet"
	"github.com/idemgen/idemgen/annotations"
	"github.com/idemgen/idemgen/internal/generate"
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
	analysistest.RunWithSuggestedFixes(t, testdata(t), idemvet.Analyzer, "example.com/vet/stale", "example.com/vet/stalebroken")
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

// recorder is an analysistest.Testing that keeps the errors instead of
// failing, for the tests that check results rather than // want comments.
type recorder struct{ errs []string }

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestSameAsIdemgen: for every package with annotation errors, the
// analyzer's diagnostics in the files it checks are exactly idemgen's
// errors there: the same file:line:col and the same text.
func TestSameAsIdemgen(t *testing.T) {
	dir := testdata(t)
	for _, pkg := range []string{"badann", "nightly"} {
		t.Run(pkg, func(t *testing.T) {
			_, err := generate.Generate(context.Background(), generate.Config{Dir: dir, Patterns: []string{"./" + pkg}})
			var list annotations.ErrorList
			require.ErrorAs(t, err, &list)
			results := analysistest.Run(&recorder{}, dir, idemvet.Analyzer, "example.com/vet/"+pkg)
			require.NotEmpty(t, results)
			r := results[0]
			inPass := map[string]bool{}
			for _, f := range r.Pass.Files {
				inPass[r.Pass.Fset.Position(f.Package).Filename] = true
			}
			var want, got []string
			for _, e := range list {
				if inPass[e.Pos.Filename] {
					want = append(want, fmt.Sprintf("%s:%d:%d: %s", e.Pos.Filename, e.Pos.Line, e.Pos.Column, e.Msg))
				}
			}
			for _, d := range r.Diagnostics {
				p := r.Pass.Fset.Position(d.Pos)
				if strings.Contains(d.Message, ".go:") {
					continue // another configuration's error, at the package clause
				}
				got = append(got, fmt.Sprintf("%s:%d:%d: %s", p.Filename, p.Line, p.Column, d.Message))
			}
			require.NotEmpty(t, want)
			assert.ElementsMatch(t, want, got)
		})
	}
}

// TestUpToDate: billing's idem_gen.go is what idemgen writes, so the
// analyzer reports nothing there, and it exports the facts the bypass check
// of other packages reads.
func TestUpToDate(t *testing.T) {
	rec := &recorder{}
	results := analysistest.Run(rec, testdata(t), idemvet.Analyzer, "example.com/vet/billing")
	require.NotEmpty(t, results)
	facts := map[string]string{}
	for _, r := range results {
		assert.Empty(t, r.Diagnostics, "%s", r.Action)
		for obj, fs := range r.Facts {
			for _, f := range fs {
				facts[obj.Name()] = fmt.Sprint(f)
			}
		}
	}
	assert.Equal(t, map[string]string{
		"Pay":                  "annotated(IdempotentService)",
		"IdempotentService":    "wrapper(Service)",
		"NewIdempotentService": "wrapper(Service)",
	}, facts)
	// The only complaints are the facts billing has no // want for.
	for _, e := range rec.errs {
		assert.Contains(t, e, "unexpected fact")
	}
}

// TestOpClash: an op that a committed generated file of another package of
// the module declares (a pin equal to billing's qualified default) is
// reported at the annotation, although the two packages never share a
// generator run.
func TestOpClash(t *testing.T) {
	analysistest.Run(t, testdata(t), idemvet.Analyzer, "example.com/vet/opclash")
}

// TestInjection: a raw service of another package given where an interface
// with its annotated method is expected (an argument, variadic too, an
// assignment, a declaration, a struct field by name or position) bypasses
// the wrapper; the wrapper, an interface of unannotated methods only, and
// a //idemvet:raw line pass.
func TestInjection(t *testing.T) {
	analysistest.Run(t, testdata(t), idemvet.Analyzer, "example.com/vet/inject")
}

// TestOpFact: an op that a dependency of another module pins too (where
// idemgen's scan of the module's committed files does not reach) is
// reported through the dependency's Ops fact, at the annotation.
func TestOpFact(t *testing.T) {
	rec := &recorder{}
	results := analysistest.Run(rec, testdata(t), idemvet.Analyzer, "example.com/vet/opdep")
	require.NotEmpty(t, results)
	var got []string
	for _, r := range results {
		for _, d := range r.Diagnostics {
			p := r.Pass.Fset.Position(d.Pos)
			got = append(got, fmt.Sprintf("%s:%d:%d: %s", filepath.Base(p.Filename), p.Line, p.Column, d.Message))
		}
	}
	assert.Equal(t, []string{`opdep.go:16:1: op "capture" is also the op of example.com/othermod/pay.(*Service).Capture (package example.com/othermod/pay, a dependency): ` +
		`methods under one op share records, so one would be answered with the other's stored outcomes; give one of them another op=`}, got)
	// The only complaints are the facts opdep has no // want for.
	for _, e := range rec.errs {
		assert.Contains(t, e, "unexpected fact")
	}
}
