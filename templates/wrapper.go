package templates

import (
	"fmt"
	"go/types"
	"strconv"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/annotations"
)

// typeGen emits the constructs of one annotated type.
type typeGen struct {
	*gen
	t       *annotations.Type
	wrapper string // IdempotentOrderService
	ctor    string // NewIdempotentOrderService
	field   string // the executor field: ex, or another name on a clash
	recv    string // the receiver of the wrapper's methods: w, or another
	methods []*methodGen
	// next is the name of the wrapper's field holding the wrapped value
	// when it cannot be embedded, because the type has a method named like
	// itself (an embedded field Pay and a method Pay would clash); then
	// every method without an annotation gets a pass-through method. ""
	// when the wrapped value is embedded.
	next string
	// passes are the methods passed through when next is set, by name.
	passes []*types.Func
}

// methodSet returns the methods of the wrapped type (*T, or the interface),
// sorted by name; nil without type information.
func (tg *typeGen) methodSet() []*types.Func {
	if tg.t.Obj == nil {
		return nil
	}
	recv := tg.t.Obj.Type()
	if !tg.t.Interface {
		recv = types.NewPointer(recv)
	}
	ms := types.NewMethodSet(recv)
	fns := make([]*types.Func, 0, ms.Len())
	for i := range ms.Len() {
		fns = append(fns, ms.At(i).Obj().(*types.Func))
	}
	return fns
}

// planNext decides whether the wrapped value is embedded or held in a named
// field (see typeGen.next), and lists the pass-through methods.
func (tg *typeGen) planNext() error {
	fns := tg.methodSet()
	clash := false
	for _, fn := range fns {
		clash = clash || fn.Name() == tg.t.Name
	}
	if !clash {
		return nil
	}
	annotated := map[string]bool{}
	for _, m := range tg.t.Methods {
		annotated[m.Name] = true
	}
	taken := map[string]bool{}
	for _, fn := range fns {
		taken[fn.Name()] = true
		if annotated[fn.Name()] {
			continue
		}
		if !fn.Exported() && fn.Pkg() != nil && fn.Pkg().Path() != tg.pkg.Path {
			if tg.t.Interface {
				return &annotations.Error{Pos: tg.t.Pos, Msg: fmt.Sprintf(
					"interface %s has a method named %s, like itself, so idemgen cannot embed it and must pass every other method through, "+
						"but method %s of package %s is unexported; rename the method %s", tg.t.Name, tg.t.Name, fn.Name(), fn.Pkg().Path(), tg.t.Name)}
			}
			continue // not callable from this package: the wrapper lacks it (docs/ANNOTATIONS.md)
		}
		tg.passes = append(tg.passes, fn)
	}
	tg.next = "next"
	for i := 2; taken[tg.next]; i++ {
		tg.next = "next" + strconv.Itoa(i)
	}
	return nil
}

// inner is the selector of the wrapped value on the wrapper: the embedded
// field (named like the type) or the next field.
func (tg *typeGen) inner() string {
	if tg.next != "" {
		return tg.next
	}
	return tg.t.Name
}

// planNames picks the executor field and the receiver name. The field must
// not shadow a field or method promoted from the wrapped type, nor be one of
// the wrapper's own methods; the receiver must differ from every parameter,
// import and package-level name the method bodies use.
func (tg *typeGen) planNames() {
	taken := map[string]bool{tg.t.Name: true}
	for _, m := range tg.t.Methods {
		taken[m.Name] = true
	}
	if tg.next != "" {
		taken[tg.next] = true
	}
	clash := func(name string) bool {
		if taken[name] || tg.t.Obj == nil {
			return taken[name]
		}
		recv := tg.t.Obj.Type()
		if !tg.t.Interface {
			recv = types.NewPointer(recv)
		}
		obj, _, _ := types.LookupFieldOrMethod(recv, true, tg.t.Obj.Pkg(), name)
		return obj != nil
	}
	tg.field = "ex"
	for i := 1; clash(tg.field); i++ {
		tg.field = "idemEx"
		if i > 1 {
			tg.field += strconv.Itoa(i)
		}
	}

	params := map[string]bool{}
	for _, mg := range tg.methods {
		mg.planParams()
		for _, n := range mg.pnames {
			params[n] = true
		}
	}
	tg.recv = tg.scope.child(params).name("w", "wr", "wrapper")
}

// wrapped returns the type the wrapper embeds: *OrderService, or Store for an
// interface.
func (tg *typeGen) wrapped() *jen.Statement {
	s := jen.Qual(tg.pkg.Path, tg.t.Name)
	if tg.t.Interface {
		return s
	}
	return jen.Op("*").Add(s)
}

// wrappedText is the wrapped type as prose: *OrderService, or Store.
func (tg *typeGen) wrappedText() string {
	if tg.t.Interface {
		return tg.t.Name
	}
	return "*" + tg.t.Name
}

func (tg *typeGen) methodNames() string {
	var names []string
	for _, m := range tg.t.Methods {
		if m.Constraint != "" && m.Constraint != tg.t.Constraint {
			// The wrapper method exists only where its method does.
			names = append(names, m.Name+" ("+m.Constraint+" builds)")
			continue
		}
		names = append(names, m.Name)
	}
	return andList(names)
}

// wrapperType declares the wrapper:
//
//	// IdempotentOrderService wraps *OrderService so that ...
//	type IdempotentOrderService struct {
//		*OrderService
//		ex *idem.Executor
//	}
func (tg *typeGen) wrapperType() jen.Code {
	what := "its annotated methods (" + tg.methodNames() + ") run"
	if len(tg.t.Methods) == 1 {
		what = "its annotated method " + tg.methodNames() + " runs"
	}
	text := tg.wrapper + " wraps " + tg.wrappedText() + " so that " + what +
		" at most once per key, replaying the stored outcome to retries. Methods without an annotation are promoted from the embedded " +
		tg.wrappedText() + " unchanged."
	if tg.next != "" {
		text = tg.wrapper + " wraps " + tg.wrappedText() + " so that " + what +
			" at most once per key, replaying the stored outcome to retries. " + tg.wrappedText() + " has a method named " + tg.t.Name +
			", like itself, so it is held in the field " + tg.next + " rather than embedded: methods without an annotation pass through to it unchanged."
	}
	if tg.t.Interface {
		text += " It implements " + tg.t.Name + "."
	}
	inner := tg.wrapped()
	if tg.next != "" {
		inner = jen.Id(tg.next).Add(inner)
	}
	return doc(text).Line().
		Type().Id(tg.wrapper).Struct(
		inner,
		jen.Id(tg.field).Op("*").Add(tg.rt("Executor")),
	)
}

// interfaceAssertion is the drift guard of a wrapped interface:
//
//	var _ Store = (*IdempotentStore)(nil)
func (tg *typeGen) interfaceAssertion() jen.Code {
	return jen.Var().Id("_").Add(jen.Qual(tg.pkg.Path, tg.t.Name)).Op("=").
		Parens(jen.Op("*").Id(tg.wrapper)).Parens(jen.Nil())
}

// constructor returns a wrapper:
//
//	// NewIdempotentOrderService returns ...
//	func NewIdempotentOrderService(next *OrderService, ex *idem.Executor) *IdempotentOrderService {
//		return &IdempotentOrderService{
//			OrderService: next,
//			ex:           ex,
//		}
//	}
func (tg *typeGen) constructor() jen.Code {
	return doc(tg.ctor+" returns a wrapper of next whose annotated methods run through ex: "+
		"each key is claimed in ex's store, the method runs once, and its outcome is replayed to retries.").Line().
		Func().Id(tg.ctor).Params(
		jen.Id("next").Add(tg.wrapped()),
		jen.Id("ex").Op("*").Add(tg.rt("Executor")),
	).Op("*").Id(tg.wrapper).Block(
		jen.Return(jen.Op("&").Id(tg.wrapper).Values(jen.Dict{
			jen.Id(tg.inner()): jen.Id("next"),
			jen.Id(tg.field):   jen.Id("ex"),
		})),
	)
}

// planParams names the wrapper's parameters: a parameter keeps its name
// unless the name is one the wrapper's body or signature may refer to in
// the file's scope (a predeclared identifier such as string or nil, a
// package-level name such as a type of the signature or a descriptor, an
// import name such as idem or context), which the parameter would shadow;
// then it is renamed (nilArg, contextArg). Parameter names are not part of
// the method's type, so the wrapper still has the same method.
func (mg *methodGen) planParams() {
	keep := map[string]bool{}
	for _, p := range mg.m.Params {
		if !mg.scope.isTaken(p.Name) {
			keep[p.Name] = true
		}
	}
	names := mg.scope.child(keep)
	mg.pnames = make([]string, len(mg.m.Params))
	for i, p := range mg.m.Params {
		if keep[p.Name] {
			mg.pnames[i] = p.Name
			continue
		}
		mg.pnames[i] = names.name(p.Name + "Arg")
	}
}

// passThrough forwards a method without an annotation to the wrapped value
// held in the next field:
//
//	// Other calls (*Pay).Other.
//	func (w *IdempotentPay) Other(n int, names ...string) (int, error) {
//		return w.next.Other(n, names...)
//	}
func (tg *typeGen) passThrough(fn *types.Func) (jen.Code, error) {
	sig := fn.Type().(*types.Signature)
	names := tg.scope.child(nil)
	names.reserve(tg.recv)
	var params, args, results []jen.Code
	for i := range sig.Params().Len() {
		t := sig.Params().At(i).Type()
		variadic := sig.Variadic() && i == sig.Params().Len()-1
		if variadic {
			t = t.(*types.Slice).Elem()
		}
		c, err := tg.typeCode(t)
		if err != nil {
			return nil, &annotations.Error{Pos: tg.t.Pos, Msg: fmt.Sprintf("cannot pass method %s through: parameter %d: %v", fn.Name(), i+1, err)}
		}
		// The method's own parameter names where they are free, as in
		// planParams.
		name := sig.Params().At(i).Name()
		switch {
		case name == "" || name == "_":
			name = names.name("p" + strconv.Itoa(i))
		case names.isTaken(name):
			name = names.name(name + "Arg")
		default:
			names.reserve(name)
		}
		if variadic {
			params = append(params, jen.Id(name).Op("...").Add(c))
			args = append(args, jen.Id(name).Op("..."))
			continue
		}
		params = append(params, jen.Id(name).Add(c))
		args = append(args, jen.Id(name))
	}
	for v := range sig.Results().Variables() {
		c, err := tg.typeCode(v.Type())
		if err != nil {
			return nil, &annotations.Error{Pos: tg.t.Pos, Msg: fmt.Sprintf("cannot pass method %s through: result: %v", fn.Name(), err)}
		}
		results = append(results, c)
	}
	call := jen.Id(tg.recv).Dot(tg.next).Dot(fn.Name()).Call(args...)
	var body jen.Code = call
	if len(results) > 0 {
		body = jen.Return(call)
	}
	what := "(" + tg.wrappedText() + ")." + fn.Name()
	if tg.t.Interface {
		what = tg.t.Name + "." + fn.Name()
	}
	return doc(fn.Name() + " calls " + what + ".").Line().
		Func().Params(jen.Id(tg.recv).Op("*").Id(tg.wrapper)).Id(fn.Name()).Params(params...).Params(results...).
		Block(body), nil
}
