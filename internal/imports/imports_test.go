package imports_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/idemgen/idemgen/"

// goList runs go list in dir (a module of the repository) and returns, for
// each package matching patterns, its dependencies within this repository.
func goList(t *testing.T, dir string, tags string, patterns ...string) map[string][]string {
	t.Helper()
	args := []string{"list", "-deps=false", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, patterns...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", dir, err, out)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var own []string
		for _, d := range f[1:] {
			if strings.HasPrefix(d, module) {
				own = append(own, strings.TrimPrefix(d, module))
			}
		}
		deps[strings.TrimPrefix(f[0], module)] = own
	}
	if len(deps) == 0 {
		t.Fatalf("go list in %s listed no package", dir)
	}
	return deps
}

// root is the repository's root directory.
func root(t *testing.T) string {
	t.Helper()
	abs, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// TestShippedImportsNoMutant: without the tag idemmutant, no package under
// runtime/ or cmd/ depends on internal/mutant, in the root module or in a
// nested one (their paths lie under the root's, so Go's internal rule lets
// them import it).
func TestShippedImportsNoMutant(t *testing.T) {
	for _, dir := range []string{".", "runtime/idemotel", "runtime/idemgrpc", "runtime/idemgin", "runtime/idemecho", "runtime/idemfiber", "runtime/sqlitestore", "cmd/idemgateway"} {
		patterns := []string{"./..."}
		if dir == "." {
			patterns = []string{"./runtime/...", "./cmd/..."}
		}
		for p, deps := range goList(t, filepath.Join(root(t), dir), "", patterns...) {
			for _, d := range deps {
				if d == "internal/mutant" {
					t.Errorf("%s imports internal/mutant in a build without the tag idemmutant: keep the hooks in files with //go:build idemmutant", p)
				}
			}
		}
	}
}

// TestLeavesImportTheCoreOnly: each runtime leaf imports, of this
// repository, runtime/idem, its own parent packages and, for the framework
// adapters, runtime/idemhttp; never another leaf. The nested modules are
// listed in their own directories.
func TestLeavesImportTheCoreOnly(t *testing.T) {
	dirs := []string{".", "runtime/idemotel", "runtime/idemgrpc", "runtime/idemgin", "runtime/idemecho", "runtime/idemfiber", "runtime/sqlitestore"}
	// The framework adapters build on idemhttp; idemgrpc shares its client
	// key format (GenerateKey, ParseKey).
	httpAdapters := map[string]bool{"runtime/idemgin": true, "runtime/idemecho": true, "runtime/idemfiber": true}
	for _, dir := range dirs {
		pattern := "./runtime/..."
		if dir != "." {
			pattern = "./..."
		}
		for p, deps := range goList(t, filepath.Join(root(t), dir), "", pattern) {
			if !strings.HasPrefix(p, "runtime/") || p == "runtime/idem" || strings.Contains(p, "/cmd/") {
				continue // the core, or a command (sqlitestore's idemctl) that wires leaves together
			}
			for _, d := range deps {
				switch {
				case d == "runtime/idem",
					strings.HasPrefix(p, d+"/"), // its own parent: idemhttp/idemhttptest -> idemhttp
					d == "runtime/idemhttp" && (httpAdapters[p] || p == "runtime/idemgrpc"),
					!strings.HasPrefix(d, "runtime/"): // internal/... of the module: checked by the Go tool
				default:
					t.Errorf("%s imports %s: a runtime leaf imports the core and its own library only (docs/ARCHITECTURE.md)", p, d)
				}
			}
		}
	}
}
