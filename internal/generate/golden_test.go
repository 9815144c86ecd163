package generate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/annotations"
	"github.com/idemgen/idemgen/templates"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ (want/idem_gen.go, want/errors.txt, want/program_out.txt)")

// goldenCase is one folder of testdata/: a package, and under want/ either
// the idem_gen.go it generates and what its program prints, or the errors
// idemgen reports for it.
type goldenCase struct {
	name    string
	dir     string // absolute
	pattern string // ./testdata/<name>, relative to the module root
	errors  bool
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return root
}

func goldenCases(t *testing.T, root string) (success, failure []goldenCase) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "testdata"))
	require.NoError(t, err)
	for _, e := range entries {
		dir := filepath.Join(root, "testdata", e.Name())
		if !e.IsDir() {
			continue
		}
		if gofiles, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(gofiles) == 0 {
			continue
		}
		c := goldenCase{name: e.Name(), dir: dir, pattern: "./testdata/" + e.Name()}
		_, err := os.Stat(filepath.Join(dir, "want", "errors.txt"))
		c.errors = err == nil
		if c.errors {
			failure = append(failure, c)
		} else {
			success = append(success, c)
		}
	}
	return success, failure
}

func patterns(cases []goldenCase) []string {
	var p []string
	for _, c := range cases {
		p = append(p, c.pattern)
	}
	return p
}

// TestGolden runs the generator on every case of testdata/ (one load for all
// the success cases, one for all the error cases), compares the output with
// want/, then compiles and vets every generated package in one go command
// each and runs every case's program, comparing what it prints with
// want/program_out.txt. -update rewrites want/.
//
// A case folder is one with .go files. A case with want/errors.txt (create
// it empty for a new case, then -update) must fail with exactly those errors, paths
// relative to the case folder. Every other case is a package main whose
// main.go uses the wrapper against memstore.
func TestGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs every golden case")
	}
	root := moduleRoot(t)
	success, failure := goldenCases(t, root)
	ctx := context.Background()

	t.Run("errors", func(t *testing.T) {
		if len(failure) == 0 {
			t.Skip("no error cases")
		}
		_, err := Generate(ctx, Config{Dir: root, Patterns: patterns(failure)})
		var list annotations.ErrorList
		require.True(t, errors.As(err, &list), "want annotation errors, got %v", err)
		byCase := map[string][]string{}
		for _, e := range list {
			found := false
			for _, c := range failure {
				rel, err := filepath.Rel(c.dir, e.Pos.Filename)
				if err == nil && !strings.HasPrefix(rel, "..") {
					pos := e.Pos
					pos.Filename = filepath.ToSlash(rel)
					byCase[c.name] = append(byCase[c.name], (&annotations.Error{Pos: pos, Msg: e.Msg}).Error())
					found = true
				}
			}
			assert.True(t, found, "error outside every case folder: %v", e)
		}
		for _, c := range failure {
			t.Run(c.name, func(t *testing.T) {
				got := strings.Join(byCase[c.name], "\n") + "\n"
				compareGolden(t, filepath.Join(c.dir, "want", "errors.txt"), got)
				assert.NotEmpty(t, byCase[c.name], "the case must fail")
			})
		}
	})

	if len(success) == 0 {
		t.Fatal("no success cases")
	}
	files, err := Generate(ctx, Config{Dir: root, Patterns: patterns(success)})
	require.NoError(t, err)
	generated := map[string][]byte{}
	for _, f := range files {
		require.False(t, f.Delete, f.Path)
		generated[f.Path] = f.Content
	}
	overlay := map[string]string{}
	tmp := t.TempDir()
	var constrained []goldenCase // cases with build constraints
	for _, c := range success {
		if _, ok := generated[filepath.Join(c.dir, templates.FileName)]; !ok {
			d, errs := scanDir(c.dir)
			require.Empty(t, errs)
			if !d.constrained() {
				assert.Fail(t, "no "+templates.FileName+" generated", c.name)
			}
		}
		var names []string
		for path, content := range generated {
			if filepath.Dir(path) != c.dir {
				continue
			}
			name := filepath.Base(path)
			names = append(names, name)
			delete(generated, path)
			t.Run(c.name+"/source/"+name, func(t *testing.T) {
				// The generator writes gofmt's layout without a gofmt
				// pass: gofmt must leave the output unchanged.
				formatted, err := format.Source(content)
				require.NoError(t, err)
				assert.Equal(t, string(formatted), string(content), "gofmt changes the output")
				compareGolden(t, filepath.Join(c.dir, "want", name), string(content))
			})
			src := filepath.Join(tmp, c.name+"_"+name)
			require.NoError(t, os.WriteFile(src, content, 0o644))
			overlay[path] = src
		}
		if !*update {
			wants, _ := filepath.Glob(filepath.Join(c.dir, "want", "idem_gen*.go"))
			for _, w := range wants {
				assert.Contains(t, names, filepath.Base(w), "%s: %s is no longer generated", c.name, w)
			}
		}
		if len(names) > 1 || (len(names) == 1 && names[0] != templates.FileName) {
			constrained = append(constrained, c)
		}
	}
	assert.Empty(t, generated, "files generated outside the case folders")
	if t.Failed() && !*update {
		t.FailNow()
	}

	// Compile and vet all cases at once, with the generated files overlaid
	// on the case folders: no copies, no network.
	overlayJSON, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	overlayFile := filepath.Join(tmp, "overlay.json")
	require.NoError(t, os.WriteFile(overlayFile, overlayJSON, 0o644))
	bin := filepath.Join(tmp, "bin") + string(filepath.Separator)
	require.NoError(t, os.Mkdir(bin, 0o755))
	goCmd(t, root, nil, append([]string{"build", "-overlay=" + overlayFile, "-o", bin}, patterns(success)...)...)
	goCmd(t, root, nil, append([]string{"vet", "-overlay=" + overlayFile}, patterns(success)...)...)

	// A case with build constraints must build and vet in every
	// configuration: on linux and darwin, with and without the pro tag; and
	// its program runs with each set of tags.
	for _, c := range constrained {
		for _, goos := range []string{"linux", "darwin"} {
			for _, tags := range []string{"", "pro"} {
				t.Run(c.name+"/vet/"+goos+"/"+cmp.Or(tags, "notags"), func(t *testing.T) {
					goCmd(t, root, []string{"GOOS=" + goos}, "vet", "-tags="+tags, "-overlay="+overlayFile, c.pattern)
				})
			}
		}
		if runtime.GOOS != "windows" {
			proBin := filepath.Join(tmp, "pro")
			require.NoError(t, os.Mkdir(proBin, 0o755))
			goCmd(t, root, nil, "build", "-tags=pro", "-overlay="+overlayFile, "-o", proBin+string(filepath.Separator), c.pattern)
			t.Run(c.name+"/program_pro", func(t *testing.T) {
				runGolden(t, ctx, filepath.Join(proBin, c.name), filepath.Join(c.dir, "want", "program_out_pro.txt"))
			})
		}
	}

	for _, c := range success {
		t.Run(c.name+"/program", func(t *testing.T) {
			exe := filepath.Join(bin, c.name)
			if runtime.GOOS == "windows" {
				exe += ".exe"
			}
			runGolden(t, ctx, exe, filepath.Join(c.dir, "want", "program_out.txt"))
		})
	}
}

// runGolden runs a case's program and compares what it prints with the
// golden file want.
func runGolden(t *testing.T, ctx context.Context, exe, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s\n%s", out, stderr.Bytes())
	compareGolden(t, want, string(out))
}

// goCmd runs the go command in dir with env added to the environment.
func goCmd(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
}

// compareGolden compares got with the file at path, or rewrites the file
// with -update.
func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/generate -update to create it")
	assert.Equal(t, string(want), got, "%s differs (go test ./internal/generate -update rewrites it)", path)
}
