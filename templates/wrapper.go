package templates

import (
	"fmt"
	"go/types"
	"strconv"
	"strings"
	"unicode/utf8"

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
func (tg *typeGen) wrapped() string {
	s := tg.qual(tg.pkg.Path, tg.t.Name)
	if tg.t.Interface {
		return s
	}
	return "*" + s
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
func (tg *typeGen) wrapperType(s *source) {
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
	s.doc(text)
	s.open("type ", tg.wrapper, " struct {")
	if tg.next == "" {
		s.line(tg.wrapped())
		s.line(tg.field, " *", tg.rt("Executor"))
	} else {
		// Named fields: their types are aligned, as gofmt aligns them.
		w := max(utf8.RuneCountInString(tg.next), utf8.RuneCountInString(tg.field)) + 1
		s.line(tg.next, pad(tg.next, w), tg.wrapped())
		s.line(tg.field, pad(tg.field, w), "*", tg.rt("Executor"))
	}
	s.close("}")
}

// interfaceAssertion is the drift guard of a wrapped interface:
//
//	var _ Store = (*IdempotentStore)(nil)
func (tg *typeGen) interfaceAssertion(s *source) {
	s.line("var _ ", tg.qual(tg.pkg.Path, tg.t.Name), " = (*", tg.wrapper, ")(nil)")
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
//
// The fields are in the order of their names' bytes (as the generator
// wrote them when it used jennifer's Dict).
func (tg *typeGen) constructor(s *source) {
	s.doc(tg.ctor + " returns a wrapper of next whose annotated methods run through ex: " +
		"each key is claimed in ex's store, the method runs once, and its outcome is replayed to retries.")
	s.open("func ", tg.ctor, "(next ", tg.wrapped(), ", ex *", tg.rt("Executor"), ") *", tg.wrapper, " {")
	s.open("return &", tg.wrapper, "{")
	fields := []keyValue{{tg.inner(), "next"}, {tg.field, "ex"}}
	if fields[1].key < fields[0].key {
		fields[0], fields[1] = fields[1], fields[0]
	}
	s.keyed(fields)
	s.close("}")
	s.close("}")
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
func (tg *typeGen) passThrough(s *source, fn *types.Func) error {
	sig := fn.Type().(*types.Signature)
	names := tg.scope.child(nil)
	names.reserve(tg.recv)
	var params, args, results []string
	for i := range sig.Params().Len() {
		t := sig.Params().At(i).Type()
		variadic := sig.Variadic() && i == sig.Params().Len()-1
		if variadic {
			t = t.(*types.Slice).Elem()
		}
		c, err := tg.typeCode(s, t)
		if err != nil {
			return &annotations.Error{Pos: tg.t.Pos, Msg: fmt.Sprintf("cannot pass method %s through: parameter %d: %v", fn.Name(), i+1, err)}
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
			params = append(params, name+" ..."+c)
			args = append(args, name+"...")
			continue
		}
		params = append(params, name+" "+c)
		args = append(args, name)
	}
	for v := range sig.Results().Variables() {
		c, err := tg.typeCode(s, v.Type())
		if err != nil {
			return &annotations.Error{Pos: tg.t.Pos, Msg: fmt.Sprintf("cannot pass method %s through: result: %v", fn.Name(), err)}
		}
		results = append(results, c)
	}
	var res string
	switch len(results) {
	case 0:
	case 1:
		res = " " + results[0]
	default:
		res = " (" + strings.Join(results, ", ") + ")"
	}
	what := "(" + tg.wrappedText() + ")." + fn.Name()
	if tg.t.Interface {
		what = tg.t.Name + "." + fn.Name()
	}
	call := tg.recv + "." + tg.next + "." + fn.Name() + "(" + strings.Join(args, ", ") + ")"
	s.doc(fn.Name() + " calls " + what + ".")
	s.open("func (", tg.recv, " *", tg.wrapper, ") ", fn.Name(), "(", strings.Join(params, ", "), ")", res, " {")
	if len(results) > 0 {
		s.line("return ", call)
	} else {
		s.line(call)
	}
	s.close("}")
	return nil
}
