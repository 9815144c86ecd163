package generate

import (
	"context"
	"errors"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/templates"
)

// Checked is one package that a caller (a vet tool, an analysis pass)
// already parsed and type-checked, in the build configuration it chose.
type Checked struct {
	// Fset holds the positions of Files; the errors Package returns are
	// positions in it.
	Fset *token.FileSet
	// Files are the package's compiled files. Package leaves out the
	// _test.go files and the files idemgen generated (its header on the
	// first line), as Generate does by loading without tests and with the
	// idemgen build tag.
	Files []*ast.File
	// Path and Name are the package's import path and name.
	Path, Name string
	// Dir is the package's directory.
	Dir string
	// Importer resolves the import paths of Files to the packages the
	// caller type-checked them against.
	Importer types.Importer
	// GoVersion and Sizes are those of the caller's type check ("" and
	// nil for the defaults).
	GoVersion string
	Sizes     types.Sizes
}

// ErrConstrained is returned by Package for a package with a file under a
// build constraint: its generated files depend on the other build
// configurations, which only Generate loads.
var ErrConstrained = errors.New("idemgen: the package has files under build constraints; Generate loads each build configuration")

// Package is Generate for one package the caller has already parsed: it
// type-checks c.Files without the generated and test files (the package as
// Generate loads it) and returns, sorted by path, the files Generate would
// write or delete for it, or the same annotations.ErrorList, through the
// same resolver and emitter. A package with build constraints gets
// ErrConstrained.
func Package(ctx context.Context, c Checked) ([]File, error) {
	var files []*ast.File
	for _, f := range c.Files {
		name := c.Fset.Position(f.Package).Filename
		if strings.HasSuffix(name, "_test.go") || IsGeneratedSyntax(f) {
			continue
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, nil
	}
	pkg := &packages.Package{PkgPath: c.Path, Name: c.Name, Dir: c.Dir, Fset: c.Fset, Syntax: files}
	info := &types.Info{
		Types:        map[ast.Expr]types.TypeAndValue{},
		Defs:         map[*ast.Ident]types.Object{},
		Uses:         map[*ast.Ident]types.Object{},
		Implicits:    map[ast.Node]types.Object{},
		Instances:    map[*ast.Ident]types.Instance{},
		Scopes:       map[ast.Node]*types.Scope{},
		Selections:   map[*ast.SelectorExpr]*types.Selection{},
		FileVersions: map[*ast.File]string{},
	}
	conf := &types.Config{
		Importer:  c.Importer,
		GoVersion: c.GoVersion,
		Sizes:     c.Sizes,
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) {
				pkg.Errors = append(pkg.Errors, packages.Error{Pos: te.Fset.Position(te.Pos).String(), Msg: te.Msg, Kind: packages.TypeError})
				return
			}
			pkg.Errors = append(pkg.Errors, packages.Error{Msg: err.Error(), Kind: packages.TypeError})
		},
	}
	pkg.Types, _ = conf.Check(c.Path, c.Fset, files, info)
	pkg.TypesInfo = info
	g := &generator{ctx: ctx, cfg: Config{Dir: c.Dir}, wd: c.Dir}
	if g.errs.load(pkg, c.Dir) {
		g.errs.list.Sort()
		return nil, g.errs.list
	}
	dir := c.Dir
	if dir == "" {
		dir = filepath.Dir(c.Fset.Position(files[0].Package).Filename)
	}
	if d := g.scanPackage(pkg, dir, false); d != nil {
		return nil, ErrConstrained
	}
	g.runDirs = append(g.runDirs, dir)
	g.checkCommittedOps()
	if len(g.errs.list) > 0 {
		g.errs.list.Sort()
		return nil, g.errs.list
	}
	slices.SortFunc(g.files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return g.files, nil
}

// IsGeneratedSyntax reports whether f starts with idemgen's header line.
func IsGeneratedSyntax(f *ast.File) bool {
	return len(f.Comments) > 0 && f.Comments[0].Pos() < f.Package &&
		f.Comments[0].List[0].Text == templates.Header
}
