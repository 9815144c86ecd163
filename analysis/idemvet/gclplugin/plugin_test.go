package gclplugin_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The setup docs/IDEMVET.md gives a user, followed in a scratch module
// (cmd/idemvet/testdata/scratch) whose go.mod replaces the idemgen module by this checkout: idemgen writes
// the wrappers, golangci-lint custom (the version tools/go.mod pins) builds
// a binary with the plugin from .custom-gcl.yml, and that binary, with the
// linter enabled as type: module in .golangci.yml, reports one of each
// mistake.
//
// golangci-lint custom clones the golangci-lint repository with git at the
// pinned version. So that only the Go module proxy is reached, a git
// first on PATH answers that clone with the same version's source from the
// module cache (go mod download); everything after the clone (the plugins
// file, the replace directive, go mod tidy, go build) is golangci-lint's
// own builder. GOSUMDB=off lets the go command write go.sum lines for
// modules of the cache without asking the checksum database.
//
// It runs only with IDEMVET_GOLANGCI=1: make test runs it alone, with a
// timeout of its own (Makefile, test-golangci).

const customGCL = `version: VERSION
name: custom-gcl
destination: ./bin
plugins:
  - module: github.com/idemgen/idemgen
    import: github.com/idemgen/idemgen/analysis/idemvet/gclplugin
    path: ROOT
`

const golangciYML = `version: "2"
linters:
  default: none
  enable:
    - idemvet
  settings:
    custom:
      idemvet:
        type: module
        description: idemgen annotations, generated wrappers and their use
`

const fakeGit = `#!/bin/sh
# golangci-lint custom runs: git clone --branch V ... https://github.com/golangci/golangci-lint.git
[ "$1" = clone ] || { echo "fake git: only clone" >&2; exit 1; }
cp -R "SRC" golangci-lint && chmod -R u+w golangci-lint
`

func TestCustomGolangciLint(t *testing.T) {
	if os.Getenv("IDEMVET_GOLANGCI") != "1" {
		t.Skip("builds golangci-lint twice (tens of minutes on a cold cache, more than go test's timeout in make test): " +
			"make test runs it on its own, with IDEMVET_GOLANGCI=1 and a longer -timeout")
	}
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	goCmd := func(dir string, env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "GOSUMDB=off", "GOTOOLCHAIN=local"}, env...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
		return string(out)
	}
	version := strings.TrimSpace(goCmd(root, nil, "list", "-modfile=tools/go.mod", "-m", "-f", "{{.Version}}", "github.com/golangci/golangci-lint/v2"))
	var mod struct{ Dir string }
	require.NoError(t, json.Unmarshal([]byte(goCmd(root, nil, "mod", "download", "-json", "github.com/golangci/golangci-lint/v2@"+version)), &mod))

	tmp := t.TempDir()
	bin := filepath.Join(tmp, "fakebin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "git"), []byte(strings.ReplaceAll(fakeGit, "SRC", mod.Dir)), 0o755))

	scratch := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "cmd", "idemvet", "testdata", "scratch", filepath.FromSlash(name)))
		require.NoError(t, err)
		return string(b)
	}
	work := filepath.Join(tmp, "shop")
	for name, content := range map[string]string{
		"go.mod":          "module example.com/shop\n\ngo 1.26.0\n\nreplace github.com/idemgen/idemgen => " + root + "\n",
		"shop/shop.go":    scratch("shop/shop.go"),
		"main.go":         scratch("main.go"),
		"bad/bad.go":      scratch("bad/bad.go"),
		".custom-gcl.yml": strings.NewReplacer("VERSION", version, "ROOT", root).Replace(customGCL),
		".golangci.yml":   golangciYML,
	} {
		path := filepath.Join(work, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	// The version a replace directive without one stands for; go get
	// runs with GOPROXY=off (this checkout is no release).
	goCmd(work, []string{"GOPROXY=off"}, "get", "-tool", "github.com/idemgen/idemgen/cmd/idemgen@v0.0.0-00010101000000-000000000000")
	goCmd(work, nil, "mod", "tidy")
	goCmd(work, nil, "generate", "./shop")
	// The annotation changes after generation: idem_gen.go is stale.
	src := strings.Replace(scratch("shop/shop.go"), "ttl=1h", "ttl=2h", 1)
	require.NoError(t, os.WriteFile(filepath.Join(work, "shop", "shop.go"), []byte(src), 0o644))

	custom := exec.Command("go", "tool", "-modfile="+filepath.Join(root, "tools", "go.mod"), "golangci-lint", "custom", "-v")
	custom.Dir = work
	custom.Env = append(os.Environ(), "GOWORK=off", "GOSUMDB=off", "GOTOOLCHAIN=local", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := custom.CombinedOutput()
	require.NoError(t, err, "golangci-lint custom: %s", out)

	lint := exec.Command(filepath.Join(work, "bin", "custom-gcl"), "run", "./...")
	lint.Dir = work
	lint.Env = append(os.Environ(), "GOWORK=off")
	out, err = lint.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	text := string(out)
	t.Log(text)
	for want := range strings.Lines(scratch("want.txt")) {
		want = strings.TrimSpace(want)
		assert.Contains(t, text, want)
	}
}
