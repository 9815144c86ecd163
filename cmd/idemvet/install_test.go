package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The setup docs/IDEMVET.md gives a new user, followed from a scratch
// module (testdata/scratch) that replaces the idemgen module by this
// checkout: go get -tool of idemgen and idemvet, go generate, then idemvet
// through go vet and standalone, on a module with one of each mistake. go get runs with
// GOPROXY=off (this checkout is no release: the version is the one a
// replace directive without one stands for); GOSUMDB=off lets the go
// command write go.sum lines for modules of the cache.

const atReplaced = "@v0.0.0-00010101000000-000000000000"

// scratchFile returns a file of testdata/scratch (README.md there).
func scratchFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "scratch", filepath.FromSlash(name)))
	require.NoError(t, err)
	return string(b)
}

func goCmd(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "go %s: %s", strings.Join(args, " "), out)
	}
	return string(out), err
}

func mustGo(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := goCmd(t, dir, env, args...)
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	return out
}

func TestScratchModule(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("runs the go command in a scratch module")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":       "module example.com/shop\n\ngo 1.26.0\n\nreplace github.com/idemgen/idemgen => " + root + "\n",
		"shop/shop.go": scratchFile(t, "shop/shop.go"),
		"main.go":      scratchFile(t, "main.go"),
	} {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	off := []string{"GOPROXY=off"}
	mustGo(t, dir, off, "get", "-tool", "github.com/idemgen/idemgen/cmd/idemgen"+atReplaced, "github.com/idemgen/idemgen/cmd/idemvet"+atReplaced)
	mustGo(t, dir, nil, "mod", "tidy")
	mustGo(t, dir, nil, "generate", "./...")

	// A correct module: nothing to say, both ways.
	shopMain := scratchFile(t, "main.go")
	fixed := strings.Replace(strings.Replace(shopMain, "memstore.New())", "memstore.New(), idem.SingleTenant())", 1), "raw.Charge", "svc.Charge", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(fixed), 0o644))
	tool := strings.TrimSpace(mustGo(t, dir, nil, "tool", "-n", "idemvet"))
	mustGo(t, dir, nil, "vet", "-vettool="+tool, "./...")
	mustGo(t, dir, nil, "tool", "idemvet", "./...")

	// One of each mistake.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(shopMain), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bad"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad", "bad.go"), []byte(scratchFile(t, "bad/bad.go")), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shop", "shop.go"), []byte(strings.Replace(scratchFile(t, "shop/shop.go"), "ttl=1h", "ttl=2h", 1)), 0o644))
	for _, args := range [][]string{
		{"vet", "-vettool=" + tool, "./..."},
		{"tool", "idemvet", "./..."},
	} {
		out, err := goCmd(t, dir, nil, args...)
		require.Error(t, err, "go %s: %s", strings.Join(args, " "), out)
		for want := range strings.Lines(scratchFile(t, "want.txt")) {
			want = strings.TrimSpace(want)
			assert.Contains(t, out, want, "go %s", strings.Join(args, " "))
		}
	}
}

// TestScratchFixStale: the round's seam, a result type changed without go
// generate. The generated file no longer compiles (idemgen's staleness
// guard); idemvet still reports it, at the annotation, and -fix rewrites it
// as idemgen would (-fix -diff only prints it), after which the module
// builds and idemgen -check agrees.
func TestScratchFixStale(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("runs the go command in a scratch module")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	main := strings.Replace(strings.Replace(scratchFile(t, "main.go"), "memstore.New())", "memstore.New(), idem.SingleTenant())", 1), "raw.Charge", "svc.Charge", 1)
	for name, content := range map[string]string{
		"go.mod":       "module example.com/shop\n\ngo 1.26.0\n\nreplace github.com/idemgen/idemgen => " + root + "\n",
		"shop/shop.go": scratchFile(t, "shop/shop.go"),
		"main.go":      main,
	} {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	mustGo(t, dir, []string{"GOPROXY=off"}, "get", "-tool", "github.com/idemgen/idemgen/cmd/idemgen"+atReplaced, "github.com/idemgen/idemgen/cmd/idemvet"+atReplaced)
	mustGo(t, dir, nil, "mod", "tidy")
	mustGo(t, dir, nil, "generate", "./...")
	gen := filepath.Join(dir, "shop", "idem_gen.go")
	before, err := os.ReadFile(gen)
	require.NoError(t, err)

	shop := strings.Replace(scratchFile(t, "shop/shop.go"), "(int, error)", "(int64, error)", 1)
	shop = strings.Replace(shop, "return s.runs, nil", "return int64(s.runs), nil", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shop", "shop.go"), []byte(shop), 0o644))
	out, err := goCmd(t, dir, nil, "build", "./...")
	require.Error(t, err, "the stale file must not compile: %s", out)

	out, err = goCmd(t, dir, nil, "tool", "idemvet", "./...")
	require.Error(t, err)
	assert.Contains(t, out, "shop/shop.go:12:1: idem_gen.go is stale: idemgen would write it differently")

	// Under go vet -vettool, the package does not type-check and
	// unitchecker never runs the analyzer: the tool reports the stale file,
	// with its diff, before the compiler's errors. (With ./..., the go
	// command compiles shop for main first and stops at that build error
	// before any vet runs: docs/IDEMVET.md.)
	tool := strings.TrimSpace(mustGo(t, dir, nil, "tool", "-n", "idemvet"))
	out, err = goCmd(t, dir, nil, "vet", "-vettool="+tool, "./shop")
	require.Error(t, err)
	assert.Contains(t, out, "shop/shop.go:12:1: idem_gen.go is stale: idemgen would write it differently", "go vet -vettool:\n%s", out)
	assert.Contains(t, out, "+++ b/idem_gen.go", "the diff, as under go tool idemvet")
	t.Logf("go vet -vettool:\n%s", out)

	out, _ = goCmd(t, dir, nil, "tool", "idemvet", "-fix", "-diff", "./...")
	assert.Contains(t, out, "+++ b/shop/idem_gen.go")
	after, err := os.ReadFile(gen)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "-fix -diff writes nothing")

	out, _ = goCmd(t, dir, nil, "tool", "idemvet", "-fix", "./...")
	assert.Contains(t, out, "idemvet: shop/idem_gen.go: rewritten as idemgen would")
	mustGo(t, dir, nil, "build", "./...")
	mustGo(t, dir, nil, "tool", "idemgen", "-check", "./...")
	mustGo(t, dir, nil, "tool", "idemvet", "./...")
}
