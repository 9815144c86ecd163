package templates

import (
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
	for _, m := range tg.t.Methods {
		for _, p := range m.Params {
			params[p.Name] = true
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
	if tg.t.Interface {
		text += " It implements " + tg.t.Name + "."
	}
	return doc(text).Line().
		Type().Id(tg.wrapper).Struct(
		tg.wrapped(),
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
//		return &IdempotentOrderService{OrderService: next, ex: ex}
//	}
func (tg *typeGen) constructor() jen.Code {
	return doc(tg.ctor+" returns a wrapper of next whose annotated methods run through ex: "+
		"each key is claimed in ex's store, the method runs once, and its outcome is replayed to retries.").Line().
		Func().Id(tg.ctor).Params(
		jen.Id("next").Add(tg.wrapped()),
		jen.Id("ex").Op("*").Add(tg.rt("Executor")),
	).Op("*").Id(tg.wrapper).Block(
		jen.Return(jen.Op("&").Id(tg.wrapper).Values(jen.Dict{
			jen.Id(tg.t.Name): jen.Id("next"),
			jen.Id(tg.field):  jen.Id("ex"),
		})),
	)
}
