package templates

import (
	"fmt"
	"go/types"
	"strings"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/annotations"
)

// methodGen emits the constructs of one annotated method.
type methodGen struct {
	*typeGen
	m    *annotations.Method
	desc string // the package-level idem.Method variable
	// pnames are the wrapper's parameter names: the method's own, except
	// where one would shadow a name the wrapper refers to (a predeclared
	// identifier, a package-level or import name, a generated name).
	pnames []string

	// Locals of the wrapper method, never equal to a parameter name.
	k, h, err string
	names     *namer
}

// errorf returns an error at the method: the generator cannot write its
// wrapper.
func (mg *methodGen) errorf(format string, args ...any) error {
	return &annotations.Error{Pos: mg.m.Pos, Msg: fmt.Sprintf("%s: ", mg.original()) + fmt.Sprintf(format, args...)}
}

// original names the wrapped method as prose: (*OrderService).Pay,
// (OrderService).Pay for a value receiver, Store.Get for an interface.
func (mg *methodGen) original() string {
	switch {
	case mg.t.Interface:
		return mg.t.Name + "." + mg.m.Name
	case mg.valueReceiver():
		return "(" + mg.t.Name + ")." + mg.m.Name
	default:
		return "(*" + mg.t.Name + ")." + mg.m.Name
	}
}

func (mg *methodGen) valueReceiver() bool {
	sig := mg.m.Sig
	if sig == nil && mg.m.Func != nil {
		sig, _ = mg.m.Func.Type().(*types.Signature)
	}
	if sig == nil || sig.Recv() == nil {
		return false
	}
	_, ptr := sig.Recv().Type().(*types.Pointer)
	return !ptr
}

func (mg *methodGen) variadic() bool { return mg.m.Sig != nil && mg.m.Sig.Variadic() }

func (mg *methodGen) keyText() string {
	var parts []string
	for _, p := range mg.m.Key {
		parts = append(parts, p.Expr)
	}
	return strings.Join(parts, "+")
}

// descriptor declares what the annotation says, for the runtime:
//
//	// idemOrderServicePay is the annotation of (*OrderService).Pay.
//	var idemOrderServicePay = idem.Method{
//		Op:    "OrderService.Pay",
//		TTL:   155 * time.Second,
//		Lease: 10 * time.Second,                 // when lease= is given
//		Wait:  3 * time.Second,                  // inflight=wait:3s
//		Renew: true,                             // renew=true
//		Final: []idem.FinalError{{Name: "ErrInsufficientFunds", Err: ErrInsufficientFunds}},
//	}
func (mg *methodGen) descriptor() jen.Code {
	fields := []jen.Code{
		jen.Id("Op").Op(":").Lit(mg.m.Op),
		jen.Id("TTL").Op(":").Add(durationCode(mg.m.TTL)),
	}
	if mg.m.Lease > 0 {
		fields = append(fields, jen.Id("Lease").Op(":").Add(durationCode(mg.m.Lease)))
	}
	if mg.m.Inflight == annotations.InflightWait && mg.m.Wait > 0 {
		fields = append(fields, jen.Id("Wait").Op(":").Add(durationCode(mg.m.Wait)))
	}
	if mg.m.Renew {
		fields = append(fields, jen.Id("Renew").Op(":").True())
	}
	if len(mg.m.Final) > 0 {
		var items []jen.Code
		for _, f := range mg.m.Final {
			items = append(items, jen.Values(jen.Id("Name").Op(":").Lit(f.Name), jen.Id("Err").Op(":").Add(mg.finalVar(f))))
		}
		fields = append(fields, jen.Id("Final").Op(":").Index().Add(mg.rt("FinalError")).Custom(jen.Options{
			Open: "{", Close: "}", Separator: ",", Multi: len(items) > 1,
		}, items...))
	}
	if len(mg.m.Sentinels) > 0 {
		fields = append(fields, mg.sentinels())
	}
	fields = append(fields, mg.scheme())
	return doc(mg.desc+" is the annotation of "+mg.original()+", for the runtime.").Line().
		Var().Id(mg.desc).Op("=").Add(mg.rt("Method")).Custom(jen.Options{
		Open: "{", Close: "}", Separator: ",", Multi: true,
	}, fields...)
}

// finalVar refers to a sentinel of final=: ErrX, or pay.ErrX from another
// package.
func (mg *methodGen) finalVar(f annotations.FinalRef) jen.Code {
	if f.Var == nil || f.Var.Pkg() == nil {
		return jen.Id(f.Name)
	}
	return jen.Qual(f.Var.Pkg().Path(), f.Var.Name())
}

// durationCode writes d in the largest exact unit: 155 * time.Second,
// 168 * time.Hour, 2500 * time.Millisecond, time.Minute.
func durationCode(d time.Duration) jen.Code {
	units := []struct {
		d    time.Duration
		name string
	}{
		{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"},
		{time.Millisecond, "Millisecond"}, {time.Microsecond, "Microsecond"},
	}
	for _, u := range units {
		if d%u.d == 0 {
			if d == u.d {
				return jen.Qual(timePath, u.name)
			}
			return jen.Lit(int(d/u.d)).Op("*").Qual(timePath, u.name)
		}
	}
	return jen.Qual(timePath, "Duration").Call(jen.Lit(int(d)))
}

// methodDoc is the doc comment of the wrapper method.
func (mg *methodGen) methodDoc() *jen.Statement {
	m := mg.m
	ttl := annotations.FormatDuration(m.TTL)
	if b := m.Budget; b != nil {
		formula := fmt.Sprintf("%d×%s", b.Retries, annotations.FormatDuration(b.Timeout))
		if b.Backoff > 0 {
			formula = fmt.Sprintf("%d×(%s+%s)", b.Retries, annotations.FormatDuration(b.Timeout), annotations.FormatDuration(b.Backoff))
		}
		for _, d := range []time.Duration{b.Downstream, b.Margin} {
			if d > 0 {
				formula += "+" + annotations.FormatDuration(d)
			}
		}
		if b.Total() == m.TTL {
			ttl += " (the retry budget " + formula + ")"
		} else {
			// The ttl is given (on the method or as a type default) and
			// covers the budget: the arithmetic is the budget's, not the
			// ttl's.
			ttl += " (covering the retry budget " + formula + " = " + annotations.FormatDuration(b.Total()) + ")"
		}
	}
	first := fmt.Sprintf("%s is the idempotent form of %s: calls with the same key (%s) run it once, and for %s every retry gets its outcome replayed.",
		m.Name, mg.original(), mg.keyText(), ttl)

	var second []string
	if m.HashNone || len(m.Hash) == 0 {
		second = append(second, "Arguments are not compared: a retry with the same key gets the outcome whatever its arguments.")
	} else {
		var names []string
		for _, i := range m.Hash {
			names = append(names, mg.pnames[i])
		}
		second = append(second, fmt.Sprintf("A retry with the same key and a different %s gets %s.ErrPayloadMismatch.",
			strings.Join(names, " or "), mg.idem))
	}
	if m.Inflight == annotations.InflightWait {
		second = append(second, fmt.Sprintf("A duplicate of a call still running waits up to %s for its outcome.", annotations.FormatDuration(m.Wait)))
	} else {
		second = append(second, fmt.Sprintf("A duplicate of a call still running gets %s.ErrInProgress.", mg.idem))
	}
	second = append(second, fmt.Sprintf("A nil or empty key part returns %s.ErrMissingKey without calling the method.", mg.idem))
	if len(m.Final) > 0 {
		var names []string
		for _, f := range m.Final {
			names = append(names, f.Name)
		}
		verb := " is"
		if len(names) > 1 {
			verb = " are"
		}
		second = append(second, andList(names)+verb+" final: stored and replayed, like errors marked with "+mg.idem+
			".Final; other errors release the key, so that a retry runs the method again.")
	} else {
		second = append(second, "Errors release the key, so that a retry runs the method again, except those marked with "+mg.idem+".Final.")
	}
	return doc(first, strings.Join(second, " "))
}

// andList joins names as prose: a, b and c.
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// method emits the wrapper method:
//
//	// Pay is the idempotent form of (*OrderService).Pay: ...
//	func (w *IdempotentOrderService) Pay(ctx context.Context, order *Order, op string) (*Receipt, error) {
//		<key>
//		<fingerprint>
//		<call>
//	}
func (mg *methodGen) method() (jen.Code, error) {
	m := mg.m
	if len(m.Params) == 0 {
		return nil, mg.errorf("no context parameter")
	}
	// The locals' layer over the file's package scope: nothing is copied.
	params := map[string]bool{}
	for _, n := range mg.pnames {
		params[n] = true
	}
	mg.names = mg.scope.child(params)
	mg.names.reserve(mg.recv)
	mg.k = mg.names.name("k", "key")
	mg.h = mg.names.name("h", "hash")
	if m.Result == nil {
		mg.err = mg.names.name("err")
	}

	var sig []jen.Code
	for i, p := range m.Params {
		t := p.Type
		variadic := mg.variadic() && i == len(m.Params)-1
		if variadic {
			t = t.(*types.Slice).Elem()
		}
		c, err := mg.typeCode(t)
		if err != nil {
			return nil, mg.errorf("parameter %s: %v", p.Name, err)
		}
		if variadic {
			sig = append(sig, jen.Id(mg.pnames[i]).Op("...").Add(c))
			continue
		}
		sig = append(sig, jen.Id(mg.pnames[i]).Add(c))
	}
	var results []jen.Code
	if m.Result != nil {
		t, err := mg.typeCode(m.Result)
		if err != nil {
			return nil, mg.errorf("result: %v", err)
		}
		results = append(results, t)
	}
	results = append(results, jen.Error())

	body, err := mg.keyParts()
	if err != nil {
		return nil, err
	}
	body = append(body, mg.fingerprint()...)
	call, err := mg.call()
	if err != nil {
		return nil, err
	}
	body = append(body, call...)

	return mg.methodDoc().Line().
		Func().Params(jen.Id(mg.recv).Op("*").Id(mg.wrapper)).Id(m.Name).Params(sig...).Params(results...).
		Block(body...), nil
}

// keyParts builds the key inline, part by part, in annotation order:
//
//	var k idem.KeyParts
//	if order == nil {
//		k.Missing("order.ID")
//	} else {
//		k.String("order.ID", order.ID)
//	}
//	k.String("op", "OrderService.Pay")
//
// Consecutive paths guarded by the same nil checks share one if: the first
// missing part is the one reported either way.
//
//	if job == nil {
//		k.Missing("job.No")
//	} else {
//		k.Stringer("job.No", job.No)
//		k.Uint(uint64(job.Shard))
//	}
func (mg *methodGen) keyParts() ([]jen.Code, error) {
	code := []jen.Code{jen.Var().Id(mg.k).Add(mg.rt("KeyParts"))}
	var group *pathCode
	flush := func() {
		if group != nil {
			code = append(code, group.code(mg.k)...)
			group = nil
		}
	}
	for _, p := range mg.m.Key {
		if p.Kind != annotations.PartPath {
			flush()
			c, err := mg.keyPart(p)
			if err != nil {
				return nil, err
			}
			code = append(code, c...)
			continue
		}
		pc, err := mg.pathPart(p)
		if err != nil {
			return nil, err
		}
		if group != nil && group.guard != "" && group.guard == pc.guard {
			group.add = append(group.add, pc.add...)
			continue
		}
		flush()
		group = pc
	}
	flush()
	return code, nil
}

// keyPart adds one operand of the key:
//
//	k.String(`"refund"`, "refund")                  // a literal
//	k.String("op", "OrderService.Refund")            // op
//	k.String("tenant", w.ex.Tenant(ctx))             // tenant
//	k.Int(int64(req.Seq))                            // a path, see pathPart
func (mg *methodGen) keyPart(p annotations.KeyPart) ([]jen.Code, error) {
	k := jen.Id(mg.k)
	switch p.Kind {
	case annotations.PartLiteral:
		return []jen.Code{k.Dot("String").Call(jen.Lit(p.Expr), jen.Lit(p.Literal))}, nil
	case annotations.PartOp:
		return []jen.Code{k.Dot("String").Call(jen.Lit(p.Expr), jen.Lit(mg.m.Op))}, nil
	case annotations.PartTenant:
		return []jen.Code{k.Dot("String").Call(jen.Lit(p.Expr),
			jen.Id(mg.recv).Dot(mg.field).Dot("Tenant").Call(jen.Id(mg.pnames[0])))}, nil
	case annotations.PartPath:
		if p.Param < 0 || p.Param >= len(mg.m.Params) {
			return nil, fmt.Errorf("%s: key part %s refers to parameter %d of %d", p.Pos, p.Expr, p.Param, len(mg.m.Params))
		}
		pc, err := mg.pathPart(p)
		if err != nil {
			return nil, err
		}
		return pc.code(mg.k), nil
	default:
		return nil, fmt.Errorf("%s: key part %s has unknown kind %d", p.Pos, p.Expr, p.Kind)
	}
}

// clause is one `if [init;] cond || cond` of a nil-check chain.
type clause struct {
	init  jen.Code
	conds []jen.Code
	text  []string // conds as written, for pathCode.guard: "req.Customer == nil"
}

// pathPart reads a parameter path, checking every pointer or interface on
// the way so that a nil is idem.ErrMissingKey rather than a panic. A value
// returned by a method and then checked is bound to a variable, so that no
// method on the path runs twice:
//
//	if req == nil || req.Customer == nil {
//		k.Missing("req.Customer.ID")
//	} else if v := req.Customer.Account(); v == nil {
//		k.Missing("req.Customer.Account().ID")
//	} else {
//		k.String("req.Customer.Account().ID", string(v.ID))
//	}
func (mg *methodGen) pathPart(p annotations.KeyPart) (*pathCode, error) {
	base, start := mg.pnames[p.Param], 0
	sel := func(base string, steps []annotations.Step) *jen.Statement {
		s := jen.Id(base)
		for _, st := range steps {
			s = s.Dot(st.Name)
			if st.Method {
				s = s.Call()
			}
		}
		return s
	}
	// isNil adds `sel == nil` to the current clause.
	isNil := func(cur *clause, base string, steps []annotations.Step) {
		cur.conds = append(cur.conds, sel(base, steps).Op("==").Nil())
		var b strings.Builder
		b.WriteString(base)
		for _, st := range steps {
			b.WriteString("." + st.Name)
			if st.Method {
				b.WriteString("()")
			}
		}
		cur.text = append(cur.text, b.String()+" == nil")
	}
	var clauses []*clause
	cur := &clause{}
	bind := func(value *jen.Statement) string {
		v := mg.names.name("v")
		if len(cur.conds) > 0 {
			clauses = append(clauses, cur)
		}
		cur = &clause{init: jen.Id(v).Op(":=").Add(value), conds: []jen.Code{jen.Id(v).Op("==").Nil()}}
		return v
	}
	for i, st := range p.Steps {
		if !st.NilCheck {
			continue
		}
		if i > start && p.Steps[i-1].Method {
			base, start = bind(sel(base, p.Steps[start:i])), i
			continue
		}
		isNil(cur, base, p.Steps[start:i])
	}
	rest := p.Steps[start:]
	calls := false
	for _, st := range rest {
		calls = calls || st.Method
	}
	if (p.Encoding == annotations.EncStringer || p.Encoding == annotations.EncTextMarshal || p.Encoding == annotations.EncTime) && nilable(p.Type) {
		if len(rest) > 0 && rest[len(rest)-1].Method {
			base, rest, calls = bind(sel(base, rest)), nil, false
		} else {
			isNil(cur, base, rest)
		}
	}
	if len(cur.conds) > 0 {
		clauses = append(clauses, cur)
	}

	var add []jen.Code
	value := sel(base, rest)
	if _, isArray := p.Type.Underlying().(*types.Array); isArray && calls {
		// v[:] needs an addressable array.
		v := mg.names.name("v")
		add = append(add, jen.Id(v).Op(":=").Add(value))
		value = jen.Id(v)
	}
	c, err := mg.encode(p, value)
	if err != nil {
		return nil, err
	}
	add = append(add, c)
	pc := &pathCode{expr: p.Expr, clauses: clauses, add: add}
	// A chain that binds no variable can be shared: it is identified by
	// its conditions as written (a.b == nil || a.b.c() == nil), which is
	// cheaper than rendering the jennifer code.
	if len(clauses) == 1 && clauses[0].init == nil {
		pc.guard = strings.Join(clauses[0].text, " || ")
	}
	return pc, nil
}

// pathCode is the code of one path: the nil-check chain and the adders.
type pathCode struct {
	expr    string
	clauses []*clause
	add     []jen.Code
	// guard identifies a chain that binds no variable, for grouping; ""
	// when the chain cannot be shared.
	guard string
}

func (pc *pathCode) code(k string) []jen.Code {
	if len(pc.clauses) == 0 {
		return pc.add
	}
	missing := jen.Id(k).Dot("Missing").Call(jen.Lit(pc.expr))
	var chain *jen.Statement
	for _, c := range pc.clauses {
		cond := jen.Add(c.conds[0])
		for _, more := range c.conds[1:] {
			cond.Op("||").Add(more)
		}
		head := []jen.Code{cond}
		if c.init != nil {
			head = []jen.Code{c.init, cond}
		}
		if chain == nil {
			chain = jen.If(head...).Block(missing)
		} else {
			chain.Else().If(head...).Block(missing)
		}
	}
	chain.Else().Block(pc.add...)
	return []jen.Code{chain}
}

// encode adds the final value of a path with the adder of its encoding:
//
//	k.String("req.ID", req.ID)          k.String("id", string(id))   // a named string type
//	k.Int(int64(req.Seq))               k.Uint(uint64(n))            k.Bool(flag)
//	k.Bytes("req.UUID", req.UUID[:])    k.Stringer("id", id)         k.Text("at", at)
//	k.Time("at", at)                    k.Time("req.At", *req.At)    k.Time("d", time.Time(d))
func (mg *methodGen) encode(p annotations.KeyPart, v *jen.Statement) (jen.Code, error) {
	k := jen.Id(mg.k)
	path := jen.Lit(p.Expr)
	switch p.Encoding {
	case annotations.EncString:
		return k.Dot("String").Call(path, convert(v, p.Type, types.Typ[types.String])), nil
	case annotations.EncInt:
		return k.Dot("Int").Call(convert(v, p.Type, types.Typ[types.Int64])), nil
	case annotations.EncUint:
		return k.Dot("Uint").Call(convert(v, p.Type, types.Typ[types.Uint64])), nil
	case annotations.EncBool:
		return k.Dot("Bool").Call(convert(v, p.Type, types.Typ[types.Bool])), nil
	case annotations.EncBytes:
		return k.Dot("Bytes").Call(path, bytesCode(v, p.Type)), nil
	case annotations.EncStringer:
		return k.Dot("Stringer").Call(path, addressIfNeeded(v, p.Type, "String")), nil
	case annotations.EncTextMarshal:
		return k.Dot("Text").Call(path, addressIfNeeded(v, p.Type, "MarshalText")), nil
	case annotations.EncTime:
		return k.Dot("Time").Call(path, timeValue(v, p.Type)), nil
	default:
		return nil, fmt.Errorf("%s: key part %s has unknown encoding %d", p.Pos, p.Expr, p.Encoding)
	}
}

// bytesCode converts a byte-like value to []byte: an array of bytes is
// sliced, v[:]; an array or slice of a named byte type (type B byte) goes
// through string, which converts from any slice of a byte kind, since
// []B does not convert to []byte; a slice of bytes is converted as needed.
//
//	id[:]   []byte(string(id[:]))   []byte(string(bs))   []byte(raw)
func bytesCode(v *jen.Statement, t types.Type) jen.Code {
	byteT := types.Typ[types.Byte]
	switch u := t.Underlying().(type) {
	case *types.Array:
		s := v.Clone().Index(jen.Empty(), jen.Empty())
		if types.Identical(u.Elem(), byteT) {
			return s
		}
		return jen.Index().Byte().Call(jen.String().Call(s))
	case *types.Slice:
		if types.Identical(u.Elem(), byteT) {
			return convert(v, t, types.NewSlice(byteT))
		}
		return jen.Index().Byte().Call(jen.String().Call(v))
	}
	return convert(v, t, types.NewSlice(byteT))
}

// convert returns v, or T(v) when v's type is not identical to to.
func convert(v *jen.Statement, t, to types.Type) jen.Code {
	if t != nil && types.Identical(t, to) {
		return v
	}
	if b, ok := to.(*types.Basic); ok {
		return jen.Id(b.Name()).Call(v)
	}
	return jen.Index().Byte().Parens(v)
}

// addressIfNeeded returns &v when only *T has the method.
func addressIfNeeded(v *jen.Statement, t types.Type, method string) jen.Code {
	if t == nil || types.IsInterface(t) {
		return v
	}
	if sel := types.NewMethodSet(t).Lookup(nil, method); sel != nil {
		return v
	}
	if sel := types.NewMethodSet(types.NewPointer(t)).Lookup(nil, method); sel != nil {
		return jen.Op("&").Add(v)
	}
	return v
}

// nilable reports whether a value of t can be nil and still be called on.
func nilable(t types.Type) bool {
	if t == nil {
		return false
	}
	switch t.Underlying().(type) {
	case *types.Pointer, *types.Interface:
		return true
	}
	return false
}

// fingerprint adds the hashed parameters to the request fingerprint, with
// the typed adder of each basic kind, the typed adders of the fields of a
// flat struct (every field of a basic kind, exported or not), and the
// runtime's canonical encoding for the rest:
//
//	var h idem.Hasher
//	if order == nil {
//		h.Nil()
//	} else {
//		h.String(order.ID)
//		h.Int(order.Amount)
//	}
//	h.String(op)
//	h.Value(meta)
func (mg *methodGen) fingerprint() []jen.Code {
	code := []jen.Code{jen.Var().Id(mg.h).Add(mg.rt("Hasher"))}
	if mg.m.HashNone {
		return code
	}
	for _, i := range mg.m.Hash {
		code = append(code, hashParam(mg.h, mg.pnames[i], mg.m.Params[i].Type, mg.pkg.Path)...)
	}
	return code
}

// hashParam adds one parameter: a flat struct field by field (behind a nil
// check for a pointer), anything else with hashAdd.
func hashParam(h, name string, t types.Type, pkg string) []jen.Code {
	fieldAdds := func(fields []*types.Var) []jen.Code {
		adds := make([]jen.Code, len(fields))
		for i, f := range fields {
			adds[i] = hashAdd(jen.Id(h), jen.Id(name).Dot(f.Name()), f.Type())
		}
		return adds
	}
	if fields, ok := flatFields(t, pkg); ok {
		return fieldAdds(fields)
	}
	if ptr, ok := t.Underlying().(*types.Pointer); ok {
		if fields, ok := flatFields(ptr.Elem(), pkg); ok {
			return []jen.Code{jen.If(jen.Id(name).Op("==").Nil()).Block(jen.Id(h).Dot("Nil").Call()).Else().Block(fieldAdds(fields)...)}
		}
	}
	return []jen.Code{hashAdd(jen.Id(h), jen.Id(name), t)}
}

// flatFields returns the fields of a struct type whose every field is of a
// basic kind (string, integer, float or bool), so that the fingerprint can
// hash them without reflection: all of them, exported or not and whatever
// their json tag, as the method sees them all. ok is false for anything
// else, and for a struct with an unexported field of another package than
// pkg (the generated code's), which the wrapper cannot name, and for a type
// that implements idem.Fingerprinter, whose method says what counts.
func flatFields(t types.Type, pkg string) (fields []*types.Var, ok bool) {
	st, isStruct := t.Underlying().(*types.Struct)
	if !isStruct || annotations.SelfFingerprinting(t) {
		return nil, false
	}
	for i := range st.NumFields() {
		f := st.Field(i)
		if f.Embedded() || !f.Exported() && (f.Pkg() == nil || f.Pkg().Path() != pkg) || f.Name() == "_" {
			return nil, false
		}
		b, isBasic := f.Type().Underlying().(*types.Basic)
		if !isBasic || b.Info()&(types.IsString|types.IsInteger|types.IsFloat|types.IsBoolean) == 0 ||
			b.Info()&types.IsComplex != 0 || b.Kind() == types.UnsafePointer {
			return nil, false
		}
		fields = append(fields, f)
	}
	return fields, len(fields) > 0
}

// hashAdd is one adder call: h.String(s), h.Int(int64(n)), h.Bytes(b), h.Value(v).
func hashAdd(h, v *jen.Statement, t types.Type) jen.Code {
	if b, ok := t.Underlying().(*types.Basic); ok {
		switch {
		case b.Info()&types.IsString != 0:
			return h.Dot("String").Call(convert(v, t, types.Typ[types.String]))
		case b.Info()&types.IsInteger != 0 && b.Info()&types.IsUnsigned != 0:
			return h.Dot("Uint").Call(convert(v, t, types.Typ[types.Uint64]))
		case b.Info()&types.IsInteger != 0:
			return h.Dot("Int").Call(convert(v, t, types.Typ[types.Int64]))
		case b.Info()&types.IsFloat != 0:
			return h.Dot("Float").Call(convert(v, t, types.Typ[types.Float64]))
		case b.Info()&types.IsBoolean != 0:
			return h.Dot("Bool").Call(convert(v, t, types.Typ[types.Bool]))
		}
	}
	if s, ok := t.Underlying().(*types.Slice); ok {
		if b, ok := s.Elem().(*types.Basic); ok && b.Kind() == types.Byte {
			return h.Dot("Bytes").Call(convert(v, t, types.NewSlice(types.Typ[types.Byte])))
		}
	}
	return h.Dot("Value").Call(v)
}

// call runs the wrapped method through the runtime:
//
//	return idem.Do(ctx, w.ex, &idemOrderServicePay, &k, &h, func(ctx context.Context) (*Receipt, error) {
//		return w.OrderService.Pay(ctx, order, op)
//	})
//
// and for a method that returns only an error:
//
//	_, err := idem.Do(ctx, w.ex, &idemOrderServiceCancel, &k, &h, func(ctx context.Context) (struct{}, error) {
//		return struct{}{}, w.OrderService.Cancel(ctx, id)
//	})
//	return err
func (mg *methodGen) call() ([]jen.Code, error) {
	m := mg.m
	ctx := mg.pnames[0]
	var args []jen.Code
	for i, name := range mg.pnames {
		if mg.variadic() && i == len(m.Params)-1 {
			args = append(args, jen.Id(name).Op("..."))
			continue
		}
		args = append(args, jen.Id(name))
	}
	inner := jen.Id(mg.recv).Dot(mg.inner()).Dot(m.Name).Call(args...)
	var result jen.Code = jen.Struct()
	if m.Result != nil {
		var err error
		if result, err = mg.typeCode(m.Result); err != nil {
			return nil, mg.errorf("result: %v", err)
		}
	}
	var ret jen.Code = jen.Return(inner)
	if m.Result == nil {
		ret = jen.Return(jen.Struct().Values(), inner)
	}
	do := mg.rt("Do").Call(
		jen.Id(ctx),
		jen.Id(mg.recv).Dot(mg.field),
		jen.Op("&").Id(mg.desc),
		jen.Op("&").Id(mg.k),
		jen.Op("&").Id(mg.h),
		jen.Func().Params(jen.Id(ctx).Qual(contextPath, "Context")).Params(result, jen.Error()).Block(ret),
	)
	if m.Result != nil {
		return []jen.Code{jen.Return(do)}, nil
	}
	return []jen.Code{
		jen.List(jen.Id("_"), jen.Id(mg.err)).Op(":=").Add(do),
		jen.Return(jen.Id(mg.err)),
	}, nil
}
