package stress

import (
	"errors"
	"os"
	"testing"
)

// RunScenario runs sc, shortened, on b and fails t on any failed assertion.
// A scenario that needs a server binary that is not installed is skipped,
// or fails under CI=true.
func RunScenario(t *testing.T, sc Scenario, b Backend, opt Options) {
	t.Helper()
	opt.Short, opt.VizDir = true, t.TempDir()
	res, err := Run(t.Context(), sc, b, opt)
	if errors.Is(err, ErrMissingServer) && os.Getenv("CI") != "true" {
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
