package templates

import (
	"fmt"
	"go/types"

	"github.com/dave/jennifer/jen"
)

// walkPackages calls visit for the package of every named type that t
// mentions, so that imports can be named before any code is emitted.
func walkPackages(t types.Type, visit func(*types.Package)) {
	seen := map[types.Type]bool{}
	var walk func(types.Type)
	walk = func(t types.Type) {
		if t == nil || seen[t] {
			return
		}
		seen[t] = true
		switch t := t.(type) {
		case *types.Basic:
			if t.Kind() == types.UnsafePointer {
				visit(types.Unsafe)
			}
		case *types.Alias:
			if p := t.Obj().Pkg(); p != nil {
				visit(p)
			}
			for i := range t.TypeArgs().Len() {
				walk(t.TypeArgs().At(i))
			}
		case *types.Named:
			if p := t.Obj().Pkg(); p != nil {
				visit(p)
			}
			for i := range t.TypeArgs().Len() {
				walk(t.TypeArgs().At(i))
			}
		case *types.Pointer:
			walk(t.Elem())
		case *types.Slice:
			walk(t.Elem())
		case *types.Array:
			walk(t.Elem())
		case *types.Map:
			walk(t.Key())
			walk(t.Elem())
		case *types.Chan:
			walk(t.Elem())
		case *types.Signature:
			for v := range t.Params().Variables() {
				walk(v.Type())
			}
			for v := range t.Results().Variables() {
				walk(v.Type())
			}
		case *types.Struct:
			for f := range t.Fields() {
				walk(f.Type())
			}
		case *types.Interface:
			for i := range t.NumEmbeddeds() {
				walk(t.EmbeddedType(i))
			}
			for m := range t.ExplicitMethods() {
				walk(m.Type())
			}
		}
	}
	walk(t)
}

// typeCode renders t as it is spelled in the generated file: named types
// through Qual, so that jennifer writes the import names chosen in plan.
//
//	*Order   []byte   map[string]pay.Amount   func(int) error   struct{ X int }
func typeCode(t types.Type) (jen.Code, error) {
	switch t := t.(type) {
	case *types.Basic:
		if t.Kind() == types.UnsafePointer {
			return jen.Qual("unsafe", "Pointer"), nil
		}
		if t.Info()&types.IsUntyped != 0 {
			return nil, fmt.Errorf("untyped %s has no spelling in a signature", t.Name())
		}
		return jen.Id(t.Name()), nil
	case *types.Alias:
		return namedCode(t.Obj(), t.TypeArgs())
	case *types.Named:
		return namedCode(t.Obj(), t.TypeArgs())
	case *types.TypeParam:
		return jen.Id(t.Obj().Name()), nil
	case *types.Pointer:
		elem, err := typeCode(t.Elem())
		return jen.Op("*").Add(elem), err
	case *types.Slice:
		elem, err := typeCode(t.Elem())
		return jen.Index().Add(elem), err
	case *types.Array:
		elem, err := typeCode(t.Elem())
		return jen.Index(jen.Lit(int(t.Len()))).Add(elem), err
	case *types.Map:
		key, err := typeCode(t.Key())
		if err != nil {
			return nil, err
		}
		elem, err := typeCode(t.Elem())
		return jen.Map(key).Add(elem), err
	case *types.Chan:
		elem, err := typeCode(t.Elem())
		switch t.Dir() {
		case types.SendOnly:
			return jen.Chan().Op("<-").Add(elem), err
		case types.RecvOnly:
			return jen.Op("<-").Chan().Add(elem), err
		default:
			return jen.Chan().Add(elem), err
		}
	case *types.Signature:
		params, results, err := signatureCode(t)
		return jen.Func().Params(params...).Params(results...), err
	case *types.Struct:
		var fields []jen.Code
		for i := range t.NumFields() {
			f := t.Field(i)
			ft, err := typeCode(f.Type())
			if err != nil {
				return nil, err
			}
			var field *jen.Statement
			if f.Embedded() {
				field = jen.Add(ft)
			} else {
				field = jen.Id(f.Name()).Add(ft)
			}
			if tag := t.Tag(i); tag != "" {
				field.Add(jen.Id("`" + tag + "`"))
			}
			fields = append(fields, field)
		}
		return jen.Struct(fields...), nil
	case *types.Interface:
		var elems []jen.Code
		for i := range t.NumEmbeddeds() {
			et, err := typeCode(t.EmbeddedType(i))
			if err != nil {
				return nil, err
			}
			elems = append(elems, et)
		}
		for m := range t.ExplicitMethods() {
			params, results, err := signatureCode(m.Type().(*types.Signature))
			if err != nil {
				return nil, err
			}
			elems = append(elems, jen.Id(m.Name()).Params(params...).Params(results...))
		}
		return jen.Interface(elems...), nil
	default:
		return nil, fmt.Errorf("type %s cannot be spelled in generated code", t)
	}
}

func namedCode(obj *types.TypeName, args *types.TypeList) (jen.Code, error) {
	var s *jen.Statement
	switch {
	case obj.Pkg() == nil: // error, comparable, any
		s = jen.Id(obj.Name())
	case obj.Parent() != nil && obj.Parent() != obj.Pkg().Scope():
		return nil, fmt.Errorf("type %s is declared inside a function; generated code cannot name it", obj.Name())
	default:
		s = jen.Qual(obj.Pkg().Path(), obj.Name())
	}
	if args.Len() > 0 {
		var codes []jen.Code
		for i := range args.Len() {
			c, err := typeCode(args.At(i))
			if err != nil {
				return nil, err
			}
			codes = append(codes, c)
		}
		s.Types(codes...)
	}
	return s, nil
}

// signatureCode renders the parameter and result types of sig, unnamed.
func signatureCode(sig *types.Signature) (params, results []jen.Code, err error) {
	for i := range sig.Params().Len() {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			elem, err := typeCode(t.(*types.Slice).Elem())
			if err != nil {
				return nil, nil, err
			}
			params = append(params, jen.Op("...").Add(elem))
			continue
		}
		c, err := typeCode(t)
		if err != nil {
			return nil, nil, err
		}
		params = append(params, c)
	}
	for v := range sig.Results().Variables() {
		c, err := typeCode(v.Type())
		if err != nil {
			return nil, nil, err
		}
		results = append(results, c)
	}
	return params, results, nil
}
