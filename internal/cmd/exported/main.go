// Command exported counts the exported identifiers of every package under
// the given directories (default "."): top-level constants, variables, types
// and functions, and the exported methods of exported types, without test
// files, testdata and nested modules. It prints one line per package, tab-
// separated: the import directory, the top-level count, the method count and
// their total, then the totals. scripts/exported.sh runs it on a checkout.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: exported [dir ...]\n\nCounts the exported identifiers of every package under each dir.")
		flag.PrintDefaults()
	}
	flag.Parse()
	roots := flag.Args()
	if len(roots) == 0 {
		roots = []string{"."}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 1, ' ', 0)
	fmt.Fprintln(w, "package\ttop-level\tmethods\ttotal")
	var top, methods int
	for _, root := range roots {
		counts, err := count(root)
		if err != nil {
			fmt.Fprintln(os.Stderr, "exported:", err)
			os.Exit(1)
		}
		for _, c := range counts {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", c.dir, c.top, c.methods, c.top+c.methods)
			top += c.top
			methods += c.methods
		}
	}
	fmt.Fprintf(w, "TOTAL\t%d\t%d\t%d\n", top, methods, top+methods)
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "exported:", err)
		os.Exit(1)
	}
}

// pkgCount is the count of one package (one directory).
type pkgCount struct {
	dir          string
	top, methods int
}

// count walks root and counts every directory that holds non-test Go files.
func count(root string) ([]pkgCount, error) {
	var out []pkgCount
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module: count it by naming it
			}
		}
		c, ok, err := countDir(path)
		if err != nil {
			return err
		}
		if ok {
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	slices.SortFunc(out, func(a, b pkgCount) int { return strings.Compare(a.dir, b.dir) })
	return out, nil
}

// countDir counts the package in dir; ok is false when dir has no non-test
// Go file. Generated files count: they are API the package exports.
func countDir(dir string) (c pkgCount, ok bool, err error) {
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return c, false, fmt.Errorf("glob %s: %w", dir, err)
	}
	c.dir = filepath.ToSlash(dir)
	for _, path := range matches {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return c, false, fmt.Errorf("parse: %w", err)
		}
		if f.Name.Name == "main" {
			continue // a command exports nothing
		}
		ok = true
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				switch {
				case d.Recv == nil && d.Name.IsExported():
					c.top++
				case d.Recv != nil && d.Name.IsExported() && ast.IsExported(recvType(d.Recv.List[0].Type)):
					c.methods++
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							c.top++
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								c.top++
							}
						}
					}
				}
			}
		}
	}
	return c, ok, nil
}

// recvType is the name of a method's receiver type (T, *T, T[P], *T[P]).
func recvType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
