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
//		Op:    "example.com/shop/orders.OrderService.Pay",
//		Func:  "example.com/shop/orders.(*OrderService).Pay",
//		TTL:   155 * time.Second,
//		Lease: 10 * time.Second,                 // when lease= is given
//		Wait:  3 * time.Second,                  // inflight=wait:3s
//		Renew: true,                             // renew=true
//		Final: []idem.FinalError{{Name: "ErrInsufficientFunds", Err: ErrInsufficientFunds}},
//		Scheme: 0xc7348673,
//		Stale:  idem.CheckLayout("OrderService.Pay", 0x1a2b3c4d, idem.HashedParam[*Order](false)), // see checkLayout
//	}
func (mg *methodGen) descriptor() (jen.Code, error) {
	fields := []jen.Code{
		jen.Id("Op").Op(":").Lit(mg.m.Op),
	}
	if mg.m.FuncName != "" {
		fields = append(fields, jen.Id("Func").Op(":").Lit(mg.m.FuncName))
	}
	fields = append(fields, jen.Id("TTL").Op(":").Add(durationCode(mg.m.TTL)))
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
		fields = append(fields, jen.Id("Final").Op(":").Add(mg.finalErrors(mg.m.Final, len(mg.m.Final) > 1)))
	}
	if len(mg.m.Sentinels) > 0 {
		fields = append(fields, mg.sentinels())
	}
	fields = append(fields, jen.Id("Scheme").Op(":").Op(fmt.Sprintf("%#08x", mg.m.Scheme)))
	if mg.m.Layout != 0 {
		stale, err := mg.checkLayout()
		if err != nil {
			return nil, err
		}
		fields = append(fields, jen.Id("Stale").Op(":").Add(stale))
	}
	return doc(mg.desc+" is the annotation of "+mg.original()+", for the runtime.").Line().
		Var().Id(mg.desc).Op("=").Add(mg.rt("Method")).Custom(multiline, fields...), nil
}

// checkLayout checks, when the package is initialized, that the hashed
// parameters have the layout the wrapper was generated for; the runtime
// refuses every call of a stale wrapper (see layoutCheck for what the
// compiler checks):
//
//	Stale: idem.CheckLayout("OrderService.Pay", 0x1a2b3c4d, idem.HashedParam[*Order](false), idem.HashedParam[string](false)),
func (mg *methodGen) checkLayout() (jen.Code, error) {
	args := []jen.Code{jen.Lit(mg.m.Op), jen.Op(fmt.Sprintf("%#08x", mg.m.Layout))}
	for _, hp := range mg.m.Fingerprint {
		t, err := mg.typeCode(mg.m.Params[hp.Param].Type)
		if err != nil {
			return nil, mg.errorf("parameter %s: %v", mg.m.Params[hp.Param].Name, err)
		}
		fields := len(hp.Values) > 0 && hp.Values[0].Field != ""
		args = append(args, mg.rt("HashedParam").Index(t).Call(jen.Lit(fields)))
	}
	return mg.rt("CheckLayout").Call(args...), nil
}

// multiline is a braced list of one element per line.
var multiline = jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}

// finalErrors are the idem.FinalError values of sentinels, one per line
// when multi: []idem.FinalError{{Name: "ErrX", Err: ErrX}}.
func (mg *methodGen) finalErrors(refs []annotations.FinalRef, multi bool) jen.Code {
	items := make([]jen.Code, len(refs))
	for i, f := range refs {
		items[i] = jen.Values(jen.Id("Name").Op(":").Lit(f.Name), jen.Id("Err").Op(":").Add(mg.finalVar(f)))
	}
	opts := multiline
	opts.Multi = multi
	return jen.Index().Add(mg.rt("FinalError")).Custom(opts, items...)
}

// sentinels lists the package's other exported error variables, so that a
// replayed idem.Final error keeps errors.Is for them:
//
//	Sentinels: []idem.FinalError{
//		{Name: "ErrCardDeclined", Err: ErrCardDeclined},
//		{Name: "ErrTimeout", Err: ErrTimeout},
//	},
func (mg *methodGen) sentinels() jen.Code {
	return jen.Id("Sentinels").Op(":").Add(mg.finalErrors(mg.m.Sentinels, true))
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
func durationCode(d time.Duration) *jen.Statement {
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
		var nilable []string
		for _, i := range m.Hash {
			if holdsSliceOrMap(m.Params[i].Type, map[types.Type]bool{}) {
				nilable = append(nilable, mg.pnames[i])
			}
		}
		if len(nilable) > 0 {
			second = append(second, fmt.Sprintf("A nil slice or map in %s is another payload than an empty one.", strings.Join(nilable, " or ")))
		}
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

	sig, results, err := mg.signature()
	if err != nil {
		return nil, err
	}

	body, err := mg.keyParts()
	if err != nil {
		return nil, err
	}
	fp, err := mg.fingerprint()
	if err != nil {
		return nil, err
	}
	call, err := mg.call()
	if err != nil {
		return nil, err
	}
	body = append(append(body, fp...), call...)
	return mg.methodDoc().Line().
		Func().Params(jen.Id(mg.recv).Op("*").Id(mg.wrapper)).Id(m.Name).Params(mg.named(sig)...).Params(results...).
		Block(body...), nil
}

// signature returns the types of the method's parameters (the last one
// ...T when variadic) and of its results, (R, error) or error.
func (mg *methodGen) signature() (params, results []jen.Code, err error) {
	m := mg.m
	params = make([]jen.Code, len(m.Params))
	for i, p := range m.Params {
		t := p.Type
		variadic := mg.variadic() && i == len(m.Params)-1
		if variadic {
			t = t.(*types.Slice).Elem()
		}
		c, err := mg.typeCode(t)
		if err != nil {
			return nil, nil, mg.errorf("parameter %s: %v", p.Name, err)
		}
		if variadic {
			c = jen.Op("...").Add(c)
		}
		params[i] = c
	}
	if m.Result != nil {
		t, err := mg.typeCode(m.Result)
		if err != nil {
			return nil, nil, mg.errorf("result: %v", err)
		}
		results = append(results, t)
	}
	return params, append(results, jen.Error()), nil
}

// named returns the parameters of the wrapper's signature: name type.
func (mg *methodGen) named(params []jen.Code) []jen.Code {
	named := make([]jen.Code, len(params))
	for i, c := range params {
		named[i] = jen.Id(mg.pnames[i]).Add(c)
	}
	return named
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
			code = append(code, group.code(mg.k))
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
			code = append(code, c)
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
//	k.String("clientkey", idem.ClientKey(ctx))       // clientkey
//	k.Int(int64(req.Seq))                            // a path, see pathPart
func (mg *methodGen) keyPart(p annotations.KeyPart) (jen.Code, error) {
	k := jen.Id(mg.k)
	switch p.Kind {
	case annotations.PartLiteral:
		return k.Dot("String").Call(jen.Lit(p.Expr), jen.Lit(p.Literal)), nil
	case annotations.PartOp:
		return k.Dot("String").Call(jen.Lit(p.Expr), jen.Lit(mg.m.Op)), nil
	case annotations.PartTenant:
		return k.Dot("String").Call(jen.Lit(p.Expr), jen.Id(mg.recv).Dot(mg.field).Dot("Tenant").Call(jen.Id(mg.pnames[0]))), nil
	case annotations.PartClientKey:
		return k.Dot("String").Call(jen.Lit(p.Expr), mg.rt("ClientKey").Call(jen.Id(mg.pnames[0]))), nil
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
	init  jen.Code   // v := req.Customer.Account(), or nil
	conds []jen.Code // req.Customer == nil
	text  []string   // conds as written, for pathCode.guard
}

// sel is base followed by the selectors of steps: req.Customer.Account().
func sel(base string, steps []annotations.Step) *jen.Statement {
	s := jen.Id(base)
	for _, st := range steps {
		s = s.Dot(st.Name)
		if st.Method {
			s = s.Call()
		}
	}
	return s
}

// selText is sel as text.
func selText(base string, steps []annotations.Step) string {
	var b strings.Builder
	b.WriteString(base)
	for _, st := range steps {
		b.WriteString("." + st.Name)
		if st.Method {
			b.WriteString("()")
		}
	}
	return b.String()
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
	var clauses []*clause
	cur := &clause{}
	isNil := func(base string, steps []annotations.Step) {
		cur.conds = append(cur.conds, sel(base, steps).Op("==").Nil())
		cur.text = append(cur.text, selText(base, steps)+" == nil")
	}
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
		isNil(base, p.Steps[start:i])
	}
	rest := p.Steps[start:]
	calls := false
	for _, st := range rest {
		calls = calls || st.Method
	}
	if p.NilCheck {
		if len(rest) > 0 && rest[len(rest)-1].Method {
			base, rest, calls = bind(sel(base, rest)), nil, false
		} else {
			isNil(base, rest)
		}
	}
	if len(cur.conds) > 0 {
		clauses = append(clauses, cur)
	}

	var add []jen.Code
	value := sel(base, rest)
	if p.Conv.Slice && calls {
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
	// its conditions as written (a.b == nil || a.b.c() == nil).
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

// code is the chain, or the adders alone when nothing is checked.
func (pc *pathCode) code(k string) jen.Code {
	if len(pc.clauses) == 0 {
		return jen.Add(joinLines(pc.add)...)
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
	return chain.Else().Block(pc.add...)
}

// joinLines puts statements one per line, for a place that takes one
// statement.
func joinLines(code []jen.Code) []jen.Code {
	out := make([]jen.Code, 0, 2*len(code))
	for i, c := range code {
		if i > 0 {
			out = append(out, jen.Line())
		}
		out = append(out, c)
	}
	return out
}

// encode adds the final value of a path with the adder of its encoding,
// converted as the resolver decided (annotations.Conversion):
//
//	k.String("req.ID", req.ID)          k.String("id", string(id))   // a named string type
//	k.Int(int64(req.Seq))               k.Uint(uint64(n))            k.Bool(flag)
//	k.Bytes("req.UUID", req.UUID[:])    k.Stringer("id", id)         k.Text("at", at)
//	k.Time("at", at)                    k.Time("req.At", *req.At)    k.Time("d", time.Time(d))
func (mg *methodGen) encode(p annotations.KeyPart, v *jen.Statement) (jen.Code, error) {
	adder, named := "", true
	switch p.Encoding {
	case annotations.EncString:
		adder = "String"
	case annotations.EncInt:
		adder, named = "Int", false
	case annotations.EncUint:
		adder, named = "Uint", false
	case annotations.EncBool:
		adder, named = "Bool", false
	case annotations.EncBytes:
		adder = "Bytes"
	case annotations.EncStringer:
		adder = "Stringer"
	case annotations.EncTextMarshal:
		adder = "Text"
	case annotations.EncTime:
		adder = "Time"
	default:
		return nil, fmt.Errorf("%s: key part %s has unknown encoding %d", p.Pos, p.Expr, p.Encoding)
	}
	arg, err := mg.conv(v, p.Conv)
	if err != nil {
		return nil, err
	}
	if named {
		return jen.Id(mg.k).Dot(adder).Call(jen.Lit(p.Expr), arg), nil
	}
	return jen.Id(mg.k).Dot(adder).Call(arg), nil
}

// conv applies a conversion to the value v: *v, &v, v[:], string(v), T(v).
func (g *gen) conv(v *jen.Statement, c annotations.Conversion) (*jen.Statement, error) {
	if c.Deref {
		v = jen.Op("*").Add(v)
	}
	if c.Addr {
		v = jen.Op("&").Add(v)
	}
	if c.Slice {
		v = jen.Add(v).Index(jen.Empty(), jen.Empty())
	}
	if c.ViaString {
		v = jen.String().Call(v)
	}
	if c.To != nil {
		t, err := g.typeCode(c.To)
		if err != nil {
			return nil, err
		}
		v = t.Call(v)
	}
	return v, nil
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
func (mg *methodGen) fingerprint() ([]jen.Code, error) {
	code := []jen.Code{jen.Var().Id(mg.h).Add(mg.rt("Hasher"))}
	for _, hp := range mg.m.Fingerprint {
		name := mg.pnames[hp.Param]
		adds := make([]jen.Code, len(hp.Values))
		for i, hv := range hp.Values {
			v := jen.Id(name)
			if hv.Field != "" {
				v = v.Dot(hv.Field)
			}
			arg, err := mg.conv(v, hv.Conv)
			if err != nil {
				return nil, mg.errorf("fingerprint of %s: %v", name, err)
			}
			adds[i] = jen.Id(mg.h).Dot(hv.Adder).Call(arg)
		}
		if hp.NilCheck {
			code = append(code, jen.If(jen.Id(name).Op("==").Nil()).Block(jen.Id(mg.h).Dot("Nil").Call()).Else().Block(adds...))
			continue
		}
		code = append(code, adds...)
	}
	return code, nil
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
	args := make([]jen.Code, len(mg.pnames))
	for i, name := range mg.pnames {
		args[i] = jen.Id(name)
		if mg.variadic() && i == len(m.Params)-1 {
			args[i] = jen.Id(name).Op("...")
		}
	}
	inner := jen.Id(mg.recv).Dot(mg.inner()).Dot(m.Name).Call(args...)
	var result jen.Code = jen.Struct()
	if m.Result != nil {
		var err error
		if result, err = mg.typeCode(m.Result); err != nil {
			return nil, mg.errorf("result: %v", err)
		}
	}
	ret := jen.Return(inner)
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

// holdsSliceOrMap reports whether a value of t can hold a slice or a map
// (outside an interface, and not in a type whose IdemFingerprint says what
// counts), where the fingerprint tells nil from empty.
func holdsSliceOrMap(t types.Type, seen map[types.Type]bool) bool {
	t = types.Unalias(t)
	if seen[t] {
		return false
	}
	seen[t] = true
	if n, ok := t.(*types.Named); ok {
		if obj := n.Obj(); obj.Pkg() != nil && obj.Pkg().Path() == "time" && obj.Name() == "Time" {
			return false
		}
		ms := types.NewMethodSet(types.NewPointer(t))
		for i := range ms.Len() {
			if ms.At(i).Obj().Name() == "IdemFingerprint" {
				return false
			}
		}
	}
	switch u := t.Underlying().(type) {
	case *types.Slice, *types.Map:
		return true
	case *types.Pointer:
		return holdsSliceOrMap(u.Elem(), seen)
	case *types.Array:
		return holdsSliceOrMap(u.Elem(), seen)
	case *types.Struct:
		for f := range u.Fields() {
			if holdsSliceOrMap(f.Type(), seen) {
				return true
			}
		}
	}
	return false
}
