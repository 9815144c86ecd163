package idemvet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"maps"
	"slices"

	"golang.org/x/tools/go/analysis"

	"github.com/idemgen/idemgen/annotations"
	"github.com/idemgen/idemgen/internal/generate"
)

// packageOps returns the ops of the package's committed generated files:
// op → the wrapped method's qualified name (idem.Method.Func). The Wrapper
// fact of each wrapper type carries them, so that importing packages
// compare their own ops with their dependencies' (an op shared with a
// package of another module, where idemgen's scan of the module's
// committed files does not reach).
func packageOps(pass *analysis.Pass) map[string]string {
	var ops map[string]string
	for _, f := range pass.Files {
		if !generate.IsGeneratedSyntax(f) {
			continue
		}
		b, err := pass.ReadFile(pass.Fset.Position(f.Package).Filename)
		if err != nil {
			continue
		}
		for fn, op := range generate.CommittedOps(b) {
			if op != "" {
				if ops == nil {
					ops = map[string]string{}
				}
				ops[op] = fn
			}
		}
	}
	return ops
}

// checkOps reports each op of ops (the package's) that a dependency's
// Wrapper fact declares for another method, at the method's annotation.
func checkOps(pass *analysis.Pass, src []*ast.File, ops map[string]string) {
	if len(ops) == 0 {
		return
	}
	seen := map[string]bool{}
	for _, of := range pass.AllObjectFacts() {
		dep, ok := of.Fact.(*Wrapper)
		pkg := of.Object.Pkg()
		// A constructor's Wrapper fact carries no Ops: only a wrapper
		// type's does. AllObjectFacts comes in no set order, so a package
		// is marked seen only by a fact that holds its ops (before, a
		// constructor's fact seen first hid the package's ops, now and
		// then).
		if !ok || len(dep.Ops) == 0 || pkg == nil || pkg == pass.Pkg || seen[pkg.Path()] {
			continue
		}
		seen[pkg.Path()] = true
		for _, op := range slices.Sorted(maps.Keys(ops)) {
			fn := ops[op]
			other, clash := dep.Ops[op]
			if !clash || other == fn {
				continue
			}
			pass.Reportf(annotationOf(pass, src, fn),
				"op %q is also the op of %s (package %s, a dependency): methods under one op share records, so one would be answered "+
					"with the other's stored outcomes; give one of them another op=", op, other, pkg.Path())
		}
	}
}

// annotationOf is the position of the //idem: line of the method whose
// qualified name is fn, or the first annotation.
func annotationOf(pass *analysis.Pass, src []*ast.File, fn string) token.Pos {
	for _, f := range src {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Doc == nil {
				continue
			}
			obj, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func)
			if !ok || obj.FullName() != fn && funcName(obj) != fn {
				continue
			}
			for _, c := range fd.Doc.List {
				if annotations.IsDirective(c.Text) {
					return c.Pos()
				}
			}
		}
	}
	return firstAnnotation(pass, src)
}

// funcName is how the runtime names a method: pkg.(*T).M or pkg.T.M.
func funcName(fn *types.Func) string {
	recv := fn.Signature().Recv()
	if recv == nil || fn.Pkg() == nil {
		return fn.FullName()
	}
	t := recv.Type()
	ptr := false
	if p, ok := t.(*types.Pointer); ok {
		t, ptr = p.Elem(), true
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return fn.FullName()
	}
	if ptr {
		return fmt.Sprintf("%s.(*%s).%s", fn.Pkg().Path(), n.Obj().Name(), fn.Name())
	}
	return fmt.Sprintf("%s.%s.%s", fn.Pkg().Path(), n.Obj().Name(), fn.Name())
}
