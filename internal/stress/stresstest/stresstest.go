// Package stresstest runs a scenario of the duplicate storm
// (internal/stress) inside a test: shortened, failing the test on every
// failed assertion.
package stresstest

import (
	"errors"
	"os"
	"testing"

	"github.com/idemgen/idemgen/internal/stress"
)

// RunScenario runs sc, shortened, on b and fails t on any failed assertion.
// A scenario that needs a server binary that is not installed is skipped,
// or fails under CI=true.
func RunScenario(t *testing.T, sc stress.Scenario, b stress.Backend, opt stress.Options) {
	t.Helper()
	opt.Short, opt.VizDir = true, t.TempDir()
	res, err := stress.Run(t.Context(), sc, b, opt)
	if errors.Is(err, stress.ErrMissingServer) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Line())
	for _, f := range res.Failures {
		t.Error(f)
	}
}
