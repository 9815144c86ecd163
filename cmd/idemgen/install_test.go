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

// The install forms the README, idemgen -h and the package doc give, tried
// from a scratch module as a user would, with the idemgen module replaced by
// this checkout.
//
// Each go get names the version the replacement stands for
// (@v0.0.0-00010101000000-000000000000) and runs with GOPROXY=off: this
// checkout is no release, and the proxy's answer for the candidate module
// path github.com/idemgen/idemgen/cmd/idemgen would be an error, not a "not
// found". The other commands use the environment's proxy only for what the
// module cache lacks (go mod tidy also wants the test dependencies of the
// tool's dependencies, such as go-cmp, which the repository's own build
// never downloads). GOSUMDB=off lets the go command write go.sum lines for
// modules of the cache without asking the checksum database: nothing but
// the module proxy is reached.
const shopSrc = `package shop

import "context"

//go:generate GENERATE

type Service struct{ runs int }

//idem:key=id ttl=1h
func (s *Service) Charge(ctx context.Context, id string) (int, error) {
	s.runs++
	return s.runs, nil
}
`

const shopMain = `package main

import (
	"context"
	"fmt"

	"example.com/shop/shop"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func main() {
	svc := shop.NewIdempotentService(&shop.Service{}, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	a, err1 := svc.Charge(context.Background(), "o1")
	b, err2 := svc.Charge(context.Background(), "o1")
	fmt.Println(a, b, err1, err2)
}
`

// atReplaced is the version of the idemgen module the scratch modules get:
// the one a replace directive without a version stands for.
const atReplaced = "@v0.0.0-00010101000000-000000000000"

// scratch writes a module that uses idemgen through generate (the command of
// its //go:generate line) and returns its directory.
func scratch(t *testing.T, generate string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"go.mod":       "module example.com/shop\n\ngo 1.26\n\nreplace github.com/idemgen/idemgen => " + root + "\n",
		"shop/shop.go": strings.Replace(shopSrc, "GENERATE", generate, 1),
		"main.go":      shopMain,
	} {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	return dir
}

// gocmd runs the go command in dir and returns its combined output and
// whether it succeeded; go get runs with GOPROXY=off.
func gocmd(t *testing.T, dir string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if args[0] == "get" {
		cmd.Env = append(cmd.Env, "GOPROXY=off")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "go %s: %s", strings.Join(args, " "), out)
	}
	return string(out), err == nil
}

func mustGo(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, ok := gocmd(t, dir, args...)
	require.True(t, ok, "go %s:\n%s", strings.Join(args, " "), out)
	return out
}

func skipShort(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("runs the go command in a scratch module")
	}
}

// TestInstallTool: go get -tool, then //go:generate go tool idemgen works,
// and still does after go mod tidy.
func TestInstallTool(t *testing.T) {
	skipShort(t)
	t.Parallel()
	dir := scratch(t, "go tool idemgen")
	mustGo(t, dir, "get", "-tool", "github.com/idemgen/idemgen/cmd/idemgen"+atReplaced)
	mustGo(t, dir, "generate", "./...")
	gen := filepath.Join(dir, "shop", "idem_gen.go")
	require.FileExists(t, gen)
	mustGo(t, dir, "mod", "tidy")
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(gomod), "tool github.com/idemgen/idemgen/cmd/idemgen", "tidy keeps the tool")
	require.NoError(t, os.Remove(gen))
	mustGo(t, dir, "generate", "./...") // after tidy
	require.FileExists(t, gen)
	mustGo(t, dir, "vet", "./...")
	assert.Equal(t, "1 1 <nil> <nil>\n", mustGo(t, dir, "run", "."), "the retry replays the first result")
	assert.True(t, strings.HasPrefix(mustGo(t, dir, "tool", "idemgen", "-version"), "idemgen v0.0.0-00010101000000-000000000000 "))
}

// TestInstallGoRun: the go run form fails with only the module required
// (the failure the docs warn about), works after go get of the command, fails
// again after go mod tidy, and survives tidy with a tools.go file.
func TestInstallGoRun(t *testing.T) {
	skipShort(t)
	t.Parallel()
	dir := scratch(t, "go run github.com/idemgen/idemgen/cmd/idemgen")
	gen := filepath.Join(dir, "shop", "idem_gen.go")

	mustGo(t, dir, "get", "github.com/idemgen/idemgen"+atReplaced)
	out, ok := gocmd(t, dir, "generate", "./...")
	require.False(t, ok, "only the module: %s", out)
	assert.Contains(t, out, "missing go.sum entry for module providing package golang.org/x/tools/go/packages")
	assert.NoFileExists(t, gen)

	mustGo(t, dir, "get", "github.com/idemgen/idemgen/cmd/idemgen"+atReplaced)
	mustGo(t, dir, "generate", "./...")
	require.FileExists(t, gen)

	mustGo(t, dir, "mod", "tidy")
	out, ok = gocmd(t, dir, "generate", "./...")
	require.False(t, ok, "go mod tidy drops the command's dependencies: %s", out)
	assert.Contains(t, out, "missing go.sum entry for module providing package golang.org/x/tools/go/packages")

	require.NoError(t, os.Mkdir(filepath.Join(dir, "tools"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tools", "tools.go"),
		[]byte("//go:build tools\n\npackage tools\n\nimport _ \"github.com/idemgen/idemgen/cmd/idemgen\"\n"), 0o644))
	mustGo(t, dir, "mod", "tidy")
	require.NoError(t, os.Remove(gen))
	mustGo(t, dir, "generate", "./...")
	require.FileExists(t, gen)
	mustGo(t, dir, "vet", "./...")
	assert.Equal(t, "1 1 <nil> <nil>\n", mustGo(t, dir, "run", "."))
}
