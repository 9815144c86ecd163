package idemvet

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"

	"github.com/idemgen/idemgen/annotations"
	"github.com/idemgen/idemgen/internal/generate"
)

// vetConfig is the part of go vet's per-package configuration file
// (golang.org/x/tools/go/analysis/unitchecker.Config) that StaleUnderVet
// reads.
type vetConfig struct {
	ImportPath  string
	GoVersion   string
	GoFiles     []string
	ImportMap   map[string]string
	PackageFile map[string]string
	VetxOnly    bool
}

// StaleUnderVet is the stale-wrapper diagnostic for go vet -vettool: run
// it with the configuration file go vet passes (cfgFile, the tool's only
// argument) before unitchecker. unitchecker type-checks the package and,
// when that fails, prints the compiler's errors and never runs the
// analyzer, so a stale idem_gen.go (which no longer compiles: idemgen's
// staleness guard) would show only its conversion errors. StaleUnderVet
// type-checks a package that has a generated file and, only when that
// fails, runs the generator on the package's own files and writes the
// analyzer's diagnostic (at the first annotation, with the diff) to w for
// each stale generated file; it reports whether it wrote one. On a package
// that type-checks it does nothing: the analyzer reports it.
func StaleUnderVet(ctx context.Context, cfgFile string, w io.Writer) bool {
	b, err := os.ReadFile(cfgFile)
	if err != nil {
		return false
	}
	var cfg vetConfig
	if json.Unmarshal(b, &cfg) != nil || cfg.VetxOnly {
		return false
	}
	fset := token.NewFileSet()
	var files, own []*ast.File
	generated := false
	for _, name := range cfg.GoFiles {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return false // the compiler's syntax error comes first
		}
		files = append(files, f)
		if generate.IsGeneratedSyntax(f) {
			generated = true
		} else {
			own = append(own, f)
		}
	}
	if !generated || len(own) == 0 {
		return false
	}
	gc := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := cfg.PackageFile[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	}).(types.ImporterFrom)
	imp := importerFunc(func(path string) (*types.Package, error) {
		if p, ok := cfg.ImportMap[path]; ok {
			path = p
		}
		if path == "unsafe" {
			return types.Unsafe, nil
		}
		return gc.ImportFrom(path, "", 0)
	})
	conf := &types.Config{Importer: imp, GoVersion: cfg.GoVersion, Error: func(error) {}}
	if _, err := conf.Check(cfg.ImportPath, fset, files, nil); err == nil {
		return false // unitchecker runs the analyzer, which reports it
	}
	dir := filepath.Dir(cfg.GoFiles[0])
	out, err := generate.Package(ctx, generate.Checked{
		Fset: fset, Files: own, Path: cfg.ImportPath, Name: own[0].Name.Name, Dir: dir,
		Importer: imp, GoVersion: cfg.GoVersion,
	})
	if err != nil {
		return false // an annotation error waits for the compiler's
	}
	at := fset.Position(own[0].Package)
	if p := firstDirective(fset, own); p.IsValid() {
		at = p
	}
	wrote := false
	for _, f := range out {
		old, err := os.ReadFile(f.Path)
		if err != nil || f.Delete || string(old) == string(f.Content) {
			continue
		}
		name := filepath.Base(f.Path)
		fmt.Fprintf(w, "%s: %s is stale: idemgen would write it differently; run go generate (idemgen) or go tool idemvet -fix\n%s\n",
			at, name, shortDiff(name, old, f.Content))
		wrote = true
	}
	return wrote
}

// firstDirective is the position of the first //idem: line of files.
func firstDirective(fset *token.FileSet, files []*ast.File) token.Position {
	for _, f := range files {
		for _, g := range f.Comments {
			for _, c := range g.List {
				if annotations.IsDirective(c.Text) {
					return fset.Position(c.Pos())
				}
			}
		}
	}
	return token.Position{}
}
