package templates

import (
	"bytes"
	"go/format"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dave/jennifer/jen"
)

// declMark is the line renderRuns puts before each declaration in
// jennifer's output, to cut the file there: a line comment holding NUL
// bytes, which no Go source (and so no name, key or op the generator copies
// from one) contains. A run where it is found more often than it was put
// sends the file to the whole-file pass.
const declMark = "//\x00idemgen:decl\x00"

// pieceHeader turns a run of declarations into a file that go/format
// accepts; its formatted form starts with the same bytes, which are cut off.
const pieceHeader = "package p\n\n"

// runDecls is how many declarations renderRuns builds, renders and formats
// together: one go/format call and one jennifer file have a fixed cost, and
// 1,000 methods (3,000 declarations) still make about a hundred runs to
// share out.
const runDecls = 32

// renderRuns returns the bytes renderWhole returns for decls, or nil when
// it cannot vouch for them. Runs of runDecls declarations are built,
// rendered by jennifer (each run in a file of its own, with the import names
// of the plan) and formatted across GOMAXPROCS goroutines; then the head of
// the file (header comment, build constraint, package clause and the
// imports every run used) is rendered and formatted. go/format's pass is
// most of the generator's own time at 1,000 methods (bench/README.md).
//
// The result equals one pass over the whole file because:
//   - gofmt lays out each top-level declaration by itself and separates two
//     of them by one blank line whenever the source has at least one;
//     renderRuns checks that jennifer wrote at least one after every
//     declaration (two newlines), and that each declaration rendered some
//     text;
//   - the import block is the one of the whole file: each import is the
//     path under the name the plan gave it (checked in every run's block,
//     and the names distinct, so jennifer renamed none), for the paths
//     some declaration used.
//
// When a check fails, a run does not format, or the mark turns up
// elsewhere, out and err are nil and render takes the whole-file pass over
// codes, the built declarations, which also reports the error.
// TestRenderRunsIsRenderWhole compares both on every model of the tests.
// A declaration that does not build returns the first such error in file
// order, as building them one by one would.
func (g *gen) renderRuns(decls []decl, runDecls int) (out []byte, codes []jen.Code, err error) {
	codes = make([]jen.Code, len(decls))
	errs := make([]error, len(decls))
	nruns := (len(decls) + runDecls - 1) / runDecls
	outs := make([][]byte, nruns+1) // the head first
	used := make([][]string, nruns)
	ok := len(decls) > 0 && parallel(nruns, func(r int) bool {
		lo, hi := r*runDecls, min((r+1)*runDecls, len(decls))
		for i := lo; i < hi; i++ {
			codes[i], errs[i] = decls[i].build()
		}
		for _, err := range errs[lo:hi] {
			if err != nil {
				return true // reported below, in file order
			}
		}
		var ok bool
		outs[r+1], used[r], ok = g.renderRun(codes[lo:hi], r == nruns-1)
		return ok
	})
	for _, err := range errs {
		if err != nil {
			return nil, codes, err
		}
	}
	if !ok {
		return nil, codes, nil
	}
	paths := slices.Compact(slices.Sorted(func(yield func(string) bool) {
		for _, ps := range used {
			for _, p := range ps {
				if !yield(p) {
					return
				}
			}
		}
	}))
	if outs[0], ok = g.renderHead(paths); !ok {
		return nil, codes, nil
	}
	size := len(outs)
	for _, o := range outs {
		size += len(o)
	}
	out = make([]byte, 0, size)
	for i, o := range outs {
		if i > 0 {
			out = append(out, '\n') // the blank line between declarations
		}
		out = append(out, o...)
	}
	return out, codes, nil
}

// renderRun renders and formats one run of declarations, and returns the
// import paths it used; last is the run that ends the file.
func (g *gen) renderRun(codes []jen.Code, last bool) (out []byte, paths []string, ok bool) {
	f := g.newFile()
	for _, code := range codes {
		f.Comment(declMark)
		f.Add(code)
		f.Line()
	}
	var buf bytes.Buffer
	if err := f.Render(&buf); err != nil {
		return nil, nil, false
	}
	parts := bytes.Split(buf.Bytes(), []byte(declMark))
	if len(parts) != len(codes)+1 {
		return nil, nil, false
	}
	if paths, ok = g.importPaths(parts[0]); !ok {
		return nil, nil, false
	}
	for i, p := range parts[1:] {
		text := bytes.TrimRight(p, " \t\n")
		if len(bytes.TrimLeft(text, " \t\n")) == 0 {
			return nil, nil, false // an empty declaration: no blank line of its own
		}
		if (!last || i < len(codes)-1) && bytes.Count(p[len(text):], []byte("\n")) < 2 {
			return nil, nil, false // no blank line before the next declaration
		}
	}
	// Within the run the marks are dropped and the blank lines around them
	// stay: gofmt makes one of two or more.
	src := make([]byte, 0, len(pieceHeader)+len(buf.Bytes()))
	src = append(src, pieceHeader...)
	for i, p := range parts[1:] {
		if i == 0 {
			p = bytes.TrimLeft(p, " \t\n")
		}
		src = append(src, p...)
	}
	formatted, err := format.Source(src)
	if err != nil || !bytes.HasPrefix(formatted, []byte(pieceHeader)) {
		return nil, nil, false
	}
	return formatted[len(pieceHeader):], paths, true
}

// renderHead renders and formats the head of the file importing paths: the
// header comment, the build constraint, the package clause and the import
// block, in goimports' groups.
func (g *gen) renderHead(paths []string) ([]byte, bool) {
	names := map[string]bool{}
	f := g.newFile()
	f.Comment(declMark)
	for _, p := range paths {
		if names[g.imports[p]] {
			return nil, false // jennifer would rename one
		}
		names[g.imports[p]] = true
		f.Add(jen.Qual(p, "X")) // registers the import; the body is cut off
	}
	var buf bytes.Buffer
	if err := f.Render(&buf); err != nil {
		return nil, false
	}
	head, _, found := bytes.Cut(buf.Bytes(), []byte(declMark))
	if !found {
		return nil, false
	}
	if got, ok := g.importPaths(head); !ok || !slices.Equal(got, paths) {
		return nil, false
	}
	head, err := groupImports(head)
	if err != nil {
		return nil, false
	}
	out, err := format.Source(head)
	return out, err == nil
}

// importPaths returns the paths of the import block of the head of a file
// jennifer rendered, sorted, when each is imported under the name the plan
// gave it (with the alias newFile wrote, or none); ok is false otherwise.
func (g *gen) importPaths(head []byte) (paths []string, ok bool) {
	_, rest, found := bytes.Cut(head, []byte("\npackage "+g.pkg.Name+"\n\n"))
	if !found {
		return nil, false
	}
	var lines []string
	switch {
	case bytes.HasPrefix(rest, []byte("import (\n")):
		block, _, found := strings.Cut(string(rest[len("import (\n"):]), ")\n")
		if !found {
			return nil, false
		}
		lines = strings.SplitAfter(block, "\n")
		lines = lines[:len(lines)-1] // after the last newline
	case bytes.HasPrefix(rest, []byte("import ")):
		line, _, _ := strings.Cut(string(rest[len("import "):]), "\n")
		lines = []string{line}
	}
	for _, line := range lines {
		line = strings.TrimSuffix(line, "\n")
		q := strings.IndexByte(line, '"')
		if q < 0 {
			return nil, false
		}
		path, err := strconv.Unquote(line[q:])
		if err != nil {
			return nil, false
		}
		name, planned := g.imports[path]
		if !planned {
			return nil, false
		}
		want := strconv.Quote(path)
		if name != g.realNames[path] || name != assumedName(path) {
			want = name + " " + want // ImportAlias in newFile
		}
		if line != want {
			return nil, false
		}
		paths = append(paths, path)
	}
	return paths, slices.IsSorted(paths)
}

// parallel calls fn(i) for every i in [0, n) across GOMAXPROCS goroutines
// and reports whether every call returned true; after the first false it
// starts no more calls.
func parallel(n int, fn func(i int) bool) bool {
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if !fn(i) {
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}
