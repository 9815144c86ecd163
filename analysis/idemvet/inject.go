package idemvet

import (
	"fmt"
	"go/ast"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// checkInjection reports a raw service value of another package, whose
// method of an interface is annotated, converted to that interface (passed
// as an argument, assigned, given as a struct field or declared): the
// usual dependency injection, api.New(inner), where everything the
// interface's holder calls bypasses the wrapper, which implements the
// interface too. raw holds the lines //idemvet:raw covers.
func checkInjection(pass *analysis.Pass, n ast.Node, raw map[int]bool) {
	switch n := n.(type) {
	case *ast.CallExpr:
		tv, ok := pass.TypesInfo.Types[n.Fun]
		if !ok || tv.IsType() {
			return
		}
		sig, ok := tv.Type.Underlying().(*types.Signature)
		if !ok {
			return
		}
		for i, arg := range n.Args {
			var pt types.Type
			switch {
			case sig.Variadic() && i >= sig.Params().Len()-1:
				if n.Ellipsis.IsValid() {
					continue
				}
				pt = sig.Params().At(sig.Params().Len() - 1).Type().(*types.Slice).Elem()
			case i < sig.Params().Len():
				pt = sig.Params().At(i).Type()
			default:
				continue
			}
			injected(pass, arg, pt, raw)
		}
	case *ast.AssignStmt:
		if len(n.Lhs) != len(n.Rhs) {
			return
		}
		for i, lhs := range n.Lhs {
			if t := pass.TypesInfo.TypeOf(lhs); t != nil && n.Tok.String() == "=" {
				injected(pass, n.Rhs[i], t, raw)
			}
		}
	case *ast.ValueSpec:
		if n.Type == nil || len(n.Values) != len(n.Names) {
			return
		}
		t := pass.TypesInfo.TypeOf(n.Type)
		for _, v := range n.Values {
			injected(pass, v, t, raw)
		}
	case *ast.CompositeLit:
		t := pass.TypesInfo.TypeOf(n)
		if t == nil {
			return
		}
		st, ok := deref(t).Underlying().(*types.Struct)
		if !ok {
			return
		}
		for i, elt := range n.Elts {
			if kv, ok := elt.(*ast.KeyValueExpr); ok {
				if id, ok := kv.Key.(*ast.Ident); ok {
					if f, ok := pass.TypesInfo.ObjectOf(id).(*types.Var); ok {
						injected(pass, kv.Value, f.Type(), raw)
					}
				}
			} else if i < st.NumFields() {
				injected(pass, elt, st.Field(i).Type(), raw)
			}
		}
	}
}

func deref(t types.Type) types.Type {
	if p, ok := t.Underlying().(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

// injected reports e when it is a raw service converted to the interface
// target with an annotated method.
func injected(pass *analysis.Pass, e ast.Expr, target types.Type, raw map[int]bool) {
	if target == nil || !types.IsInterface(target) {
		return
	}
	t := pass.TypesInfo.TypeOf(e)
	if t == nil || types.IsInterface(t) {
		return
	}
	iface, ok := target.Underlying().(*types.Interface)
	if !ok || iface.NumMethods() == 0 {
		return
	}
	ms := types.NewMethodSet(t)
	var annotated []string
	var fact Annotated
	for m := range iface.Methods() {
		sel := ms.Lookup(m.Pkg(), m.Name())
		if sel == nil {
			return
		}
		fn, ok := sel.Obj().(*types.Func)
		if !ok || fn.Pkg() == nil || fn.Pkg() == pass.Pkg || fn.Pkg().Path() == pass.Pkg.Path() {
			continue
		}
		var f Annotated
		if pass.ImportObjectFact(fn.Origin(), &f) {
			annotated = append(annotated, fn.Name())
			fact = f
		}
	}
	if len(annotated) == 0 || raw[pass.Fset.Position(e.Pos()).Line] {
		return
	}
	qual := ""
	if n, ok := types.Unalias(deref(t)).(*types.Named); ok && n.Obj().Pkg() != nil {
		qual = n.Obj().Pkg().Name() + "."
	}
	pass.Report(analysis.Diagnostic{
		Pos: e.Pos(), End: e.End(),
		Message: fmt.Sprintf("a raw %s used as %s bypasses the wrapper of its annotated %s: every call through the interface runs "+
			"without idempotency; pass a %s%s (made by %s%s), which implements it too, or mark a deliberate raw use with %s",
			types.TypeString(t, byName(pass.Pkg)), types.TypeString(target, byName(pass.Pkg)),
			strings.Join(annotated, ", "), qual, fact.Wrapper, qual, fact.Ctor, RawDirective),
	})
}

// byName qualifies a type of another package than pkg by its package name.
func byName(pkg *types.Package) types.Qualifier {
	return func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
}
