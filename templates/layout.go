package templates

import (
	"go/types"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/annotations"
)

// layoutCheck fails to compile when the method, or a type its key or its
// fingerprint reads, no longer has the layout the wrapper was generated
// from, with a message that says to run go generate (each checked value
// goes through idem.StaleRunGoGenerate, which the compiler's message
// quotes). It is a function that is never called:
//
//	// A build error here means that (*OrderService).Pay or a type its key or
//	// fingerprint reads changed since this file was generated: run go generate.
//	func _(ctx context.Context, order *Order, note string) {
//		_ = (func(*OrderService, context.Context, *Order, string) (*Receipt, error))(idem.StaleRunGoGenerate((*OrderService).Pay))
//		var _ *Customer = idem.StaleRunGoGenerate(order.Customer)
//		var _ OrderID = idem.StaleRunGoGenerate(order.Customer.ID)
//		_ = (*string)(idem.StaleRunGoGenerate((*OrderID)(nil)))
//		_ = (*struct {
//			ID     string
//			Amount int64
//		})(idem.StaleRunGoGenerate((*Refund)(nil)))
//	}
//
// The checks: the method's signature (a method expression converted to
// the func type the wrapper calls); the type of every step of every key
// path (an assignment, which a changed named type fails); the underlying
// type of every named type the wrapper converts (a pointer conversion,
// which needs identical underlying types: type ID string becoming type ID
// int fails, though string(id) would still compile); and the fields of
// every struct hashed field by field, in order, with their names and types
// (a pointer conversion to the anonymous struct: a field added, removed,
// renamed, retyped or moved fails). A type the file cannot name (an
// unexported type of another package) is not checked here: the runtime
// checks the fingerprint's layout at the method's first call (Method.Hashed).
func (mg *methodGen) layoutCheck() (jen.Code, error) {
	m := mg.m
	stale := func(v jen.Code) *jen.Statement { return mg.rt("StaleRunGoGenerate").Call(v) }
	var body []jen.Code

	// The signature: the receiver, then the parameters and results.
	recv := jen.Qual(mg.pkg.Path, mg.t.Name)
	expr := jen.Qual(mg.pkg.Path, mg.t.Name).Dot(m.Name)
	if !mg.t.Interface {
		recv = jen.Op("*").Add(recv)
		expr = jen.Parens(jen.Op("*").Qual(mg.pkg.Path, mg.t.Name)).Dot(m.Name)
	}
	params, results, err := mg.signature()
	if err != nil {
		return nil, err
	}
	body = append(body, jen.Id("_").Op("=").Parens(jen.Func().Params(append([]jen.Code{recv}, params...)...).Params(results...)).Call(stale(expr)))

	// Named types whose underlying type the wrapper relies on, each once.
	underlying := map[types.Type]bool{}
	checkUnderlying := func(t types.Type, to types.Type) {
		t = types.Unalias(t)
		n, ok := t.(*types.Named)
		if !ok || types.IsInterface(t) || isTimeType(n) {
			return
		}
		for u := range underlying {
			if types.Identical(u, t) {
				return
			}
		}
		underlying[t] = true
		tc, err := mg.typeCode(t)
		if err != nil {
			return
		}
		uc, err := mg.typeCode(t.Underlying())
		if err != nil {
			if to == nil || !types.Identical(to.Underlying(), t.Underlying()) {
				return
			}
			if uc, err = mg.typeCode(to); err != nil {
				return
			}
		}
		body = append(body, jen.Id("_").Op("=").Parens(jen.Op("*").Add(uc)).Call(stale(jen.Parens(jen.Op("*").Add(tc)).Call(jen.Nil()))))
	}

	// Every step of every key path, each once.
	seen := map[string]bool{}
	for _, p := range m.Key {
		if p.Kind != annotations.PartPath || p.Param < 0 || p.Param >= len(mg.pnames) {
			continue
		}
		base := mg.pnames[p.Param]
		for i, st := range p.Steps {
			if st.Type == nil {
				continue
			}
			text := selText(base, p.Steps[:i+1])
			if seen[text] {
				continue
			}
			seen[text] = true
			c, err := mg.typeCode(st.Type)
			if err != nil {
				continue // the runtime cannot check it either; the adder's conversion is checked below
			}
			body = append(body, jen.Var().Id("_").Add(c).Op("=").Add(stale(sel(base, p.Steps[:i+1]))))
		}
		if p.Type != nil && p.Conv.To != nil {
			checkUnderlying(p.Type, p.Conv.To)
		}
	}

	// The fields of every struct hashed field by field.
	for _, hp := range m.Fingerprint {
		if len(hp.Values) == 0 || hp.Values[0].Field == "" {
			continue
		}
		t := m.Params[hp.Param].Type
		if hp.NilCheck {
			t = t.Underlying().(*types.Pointer).Elem()
		}
		st, ok := t.Underlying().(*types.Struct)
		if !ok {
			continue
		}
		tc, err := mg.typeCode(t)
		if err != nil {
			continue
		}
		fields := make([]jen.Code, 0, st.NumFields())
		spellable := true
		for f := range st.Fields() {
			fc, err := mg.typeCode(f.Type())
			if err != nil {
				spellable = false // checked at the first call (Method.Hashed)
				break
			}
			fields = append(fields, jen.Id(f.Name()).Add(fc))
		}
		if spellable {
			body = append(body, jen.Id("_").Op("=").Parens(jen.Op("*").Struct(fields...)).Call(stale(jen.Parens(jen.Op("*").Add(tc)).Call(jen.Nil()))))
		}
		for f := range st.Fields() {
			checkUnderlying(f.Type(), nil)
		}
	}

	return doc("A build error here means that " + mg.original() + " or a type its key or fingerprint reads changed since this file was generated: run go generate.").Line().
		Func().Id("_").Params(mg.named(params)...).Block(body...), nil
}

// isTimeType reports whether n is time.Time, whose underlying struct no
// other package can write.
func isTimeType(n *types.Named) bool {
	obj := n.Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == timePath && obj.Name() == "Time"
}
