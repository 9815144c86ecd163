package mutant_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShippedImportsNoMutant: no package a user imports (runtime/..., cmd/...)
// depends on internal/mutant in a build without the tag idemmutant, so no
// shipped binary carries the planted mistakes or a lookup for them.
func TestShippedImportsNoMutant(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}",
		"github.com/idemgen/idemgen/runtime/...", "github.com/idemgen/idemgen/cmd/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list listed %d packages: %q", len(deps), deps)
	}
	for _, p := range deps {
		if p == "github.com/idemgen/idemgen/internal/mutant" {
			t.Fatal("a shipped package imports internal/mutant: keep the hooks in files with //go:build idemmutant")
		}
	}
}
