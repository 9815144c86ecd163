package templates

import (
	"fmt"
	"go/types"
	"strconv"
	"strings"
	"time"

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
//	}
func (mg *methodGen) descriptor(s *source) {
	fields := []keyValue{
		{"Op", strconv.Quote(mg.m.Op)},
	}
	if mg.m.FuncName != "" {
		fields = append(fields, keyValue{"Func", strconv.Quote(mg.m.FuncName)})
	}
	fields = append(fields, keyValue{"TTL", mg.durationCode(mg.m.TTL)})
	if mg.m.Lease > 0 {
		fields = append(fields, keyValue{"Lease", mg.durationCode(mg.m.Lease)})
	}
	if mg.m.Inflight == annotations.InflightWait && mg.m.Wait > 0 {
		fields = append(fields, keyValue{"Wait", mg.durationCode(mg.m.Wait)})
	}
	if mg.m.Renew {
		fields = append(fields, keyValue{"Renew", "true"})
	}
	if len(mg.m.Final) > 0 {
		items := mg.finalErrors(mg.m.Final)
		open := "[]" + mg.rt("FinalError")
		if len(items) > 1 {
			fields = append(fields, keyValue{"Final", block(open, items)})
		} else {
			fields = append(fields, keyValue{"Final", open + "{" + items[0] + "}"})
		}
	}
	if len(mg.m.Sentinels) > 0 {
		fields = append(fields, mg.sentinels())
	}
	fields = append(fields, keyValue{"Scheme", fmt.Sprintf("%#08x", mg.m.Scheme)})
	s.doc(mg.desc + " is the annotation of " + mg.original() + ", for the runtime.")
	s.open("var ", mg.desc, " = ", mg.rt("Method"), "{")
	s.keyed(fields)
	s.close("}")
}

// finalErrors are the idem.FinalError values of sentinels:
// {Name: "ErrX", Err: ErrX}.
func (mg *methodGen) finalErrors(refs []annotations.FinalRef) []string {
	items := make([]string, len(refs))
	for i, f := range refs {
		items[i] = "{Name: " + strconv.Quote(f.Name) + ", Err: " + mg.finalVar(f) + "}"
	}
	return items
}

// sentinels lists the package's other exported error variables, so that a
// replayed idem.Final error keeps errors.Is for them:
//
//	Sentinels: []idem.FinalError{
//		{Name: "ErrCardDeclined", Err: ErrCardDeclined},
//		{Name: "ErrTimeout", Err: ErrTimeout},
//	},
func (mg *methodGen) sentinels() keyValue {
	return keyValue{"Sentinels", block("[]"+mg.rt("FinalError"), mg.finalErrors(mg.m.Sentinels))}
}

// finalVar refers to a sentinel of final=: ErrX, or pay.ErrX from another
// package.
func (mg *methodGen) finalVar(f annotations.FinalRef) string {
	if f.Var == nil || f.Var.Pkg() == nil {
		return f.Name
	}
	return mg.qual(f.Var.Pkg().Path(), f.Var.Name())
}

// durationCode writes d in the largest exact unit: 155 * time.Second,
// 168 * time.Hour, 2500 * time.Millisecond, time.Minute.
func (g *gen) durationCode(d time.Duration) string {
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
				return g.qual(timePath, u.name)
			}
			return strconv.FormatInt(int64(d/u.d), 10) + " * " + g.qual(timePath, u.name)
		}
	}
	return g.qual(timePath, "Duration") + "(" + strconv.FormatInt(int64(d), 10) + ")"
}

// methodDoc is the doc comment of the wrapper method.
func (mg *methodGen) methodDoc(s *source) {
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
	s.doc(first, strings.Join(second, " "))
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
func (mg *methodGen) method(s *source) error {
	m := mg.m
	if len(m.Params) == 0 {
		return mg.errorf("no context parameter")
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

	sig := make([]string, len(m.Params))
	for i, p := range m.Params {
		t := p.Type
		variadic := mg.variadic() && i == len(m.Params)-1
		if variadic {
			t = t.(*types.Slice).Elem()
		}
		c, err := mg.typeCode(s, t)
		if err != nil {
			return mg.errorf("parameter %s: %v", p.Name, err)
		}
		if variadic {
			c = "..." + c
		}
		sig[i] = mg.pnames[i] + " " + c
	}
	results := "error"
	if m.Result != nil {
		t, err := mg.typeCode(s, m.Result)
		if err != nil {
			return mg.errorf("result: %v", err)
		}
		results = "(" + t + ", error)"
	}
	mg.methodDoc(s)
	s.open("func (", mg.recv, " *", mg.wrapper, ") ", m.Name, "(", strings.Join(sig, ", "), ") ", results, " {")
	if err := mg.keyParts(s); err != nil {
		return err
	}
	if err := mg.fingerprint(s); err != nil {
		return err
	}
	if err := mg.call(s); err != nil {
		return err
	}
	s.close("}")
	return nil
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
func (mg *methodGen) keyParts(s *source) error {
	s.line("var ", mg.k, " ", mg.rt("KeyParts"))
	var group *pathCode
	flush := func() {
		if group != nil {
			group.write(s, mg.k)
			group = nil
		}
	}
	for _, p := range mg.m.Key {
		if p.Kind != annotations.PartPath {
			flush()
			if err := mg.keyPart(s, p); err != nil {
				return err
			}
			continue
		}
		pc, err := mg.pathPart(s, p)
		if err != nil {
			return err
		}
		if group != nil && group.guard != "" && group.guard == pc.guard {
			group.add = append(group.add, pc.add...)
			continue
		}
		flush()
		group = pc
	}
	flush()
	return nil
}

// keyPart adds one operand of the key:
//
//	k.String(`"refund"`, "refund")                  // a literal
//	k.String("op", "OrderService.Refund")            // op
//	k.String("tenant", w.ex.Tenant(ctx))             // tenant
//	k.Int(int64(req.Seq))                            // a path, see pathPart
func (mg *methodGen) keyPart(s *source, p annotations.KeyPart) error {
	switch p.Kind {
	case annotations.PartLiteral:
		s.line(mg.k, ".String(", strconv.Quote(p.Expr), ", ", strconv.Quote(p.Literal), ")")
	case annotations.PartOp:
		s.line(mg.k, ".String(", strconv.Quote(p.Expr), ", ", strconv.Quote(mg.m.Op), ")")
	case annotations.PartTenant:
		s.line(mg.k, ".String(", strconv.Quote(p.Expr), ", ", mg.recv, ".", mg.field, ".Tenant(", mg.pnames[0], "))")
	case annotations.PartPath:
		if p.Param < 0 || p.Param >= len(mg.m.Params) {
			return fmt.Errorf("%s: key part %s refers to parameter %d of %d", p.Pos, p.Expr, p.Param, len(mg.m.Params))
		}
		pc, err := mg.pathPart(s, p)
		if err != nil {
			return err
		}
		pc.write(s, mg.k)
	default:
		return fmt.Errorf("%s: key part %s has unknown kind %d", p.Pos, p.Expr, p.Kind)
	}
	return nil
}

// clause is one `if [init;] cond || cond` of a nil-check chain.
type clause struct {
	init  string
	conds []string // "req.Customer == nil"
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
func (mg *methodGen) pathPart(s *source, p annotations.KeyPart) (*pathCode, error) {
	base, start := mg.pnames[p.Param], 0
	sel := func(base string, steps []annotations.Step) string {
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
	var clauses []*clause
	cur := &clause{}
	bind := func(value string) string {
		v := mg.names.name("v")
		if len(cur.conds) > 0 {
			clauses = append(clauses, cur)
		}
		cur = &clause{init: v + " := " + value, conds: []string{v + " == nil"}}
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
		cur.conds = append(cur.conds, sel(base, p.Steps[start:i])+" == nil")
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
			cur.conds = append(cur.conds, sel(base, rest)+" == nil")
		}
	}
	if len(cur.conds) > 0 {
		clauses = append(clauses, cur)
	}

	var add []string
	value := sel(base, rest)
	if p.Conv.Slice && calls {
		// v[:] needs an addressable array.
		v := mg.names.name("v")
		add = append(add, v+" := "+value)
		value = v
	}
	c, err := mg.encode(s, p, value)
	if err != nil {
		return nil, err
	}
	add = append(add, c)
	pc := &pathCode{expr: p.Expr, clauses: clauses, add: add}
	// A chain that binds no variable can be shared: it is identified by
	// its conditions (a.b == nil || a.b.c() == nil).
	if len(clauses) == 1 && clauses[0].init == "" {
		pc.guard = strings.Join(clauses[0].conds, " || ")
	}
	return pc, nil
}

// pathCode is the code of one path: the nil-check chain and the adders.
type pathCode struct {
	expr    string
	clauses []*clause
	add     []string
	// guard identifies a chain that binds no variable, for grouping; ""
	// when the chain cannot be shared.
	guard string
}

// write writes the chain, or the adders alone when nothing is checked.
func (pc *pathCode) write(s *source, k string) {
	if len(pc.clauses) == 0 {
		for _, a := range pc.add {
			s.line(a)
		}
		return
	}
	missing := k + ".Missing(" + strconv.Quote(pc.expr) + ")"
	for i, c := range pc.clauses {
		head := strings.Join(c.conds, " || ")
		if c.init != "" {
			head = c.init + "; " + head
		}
		if i == 0 {
			s.open("if ", head, " {")
		} else {
			s.indent--
			s.open("} else if ", head, " {")
		}
		s.line(missing)
	}
	s.indent--
	s.open("} else {")
	for _, a := range pc.add {
		s.line(a)
	}
	s.close("}")
}

// encode adds the final value of a path with the adder of its encoding,
// converted as the resolver decided (annotations.Conversion):
//
//	k.String("req.ID", req.ID)          k.String("id", string(id))   // a named string type
//	k.Int(int64(req.Seq))               k.Uint(uint64(n))            k.Bool(flag)
//	k.Bytes("req.UUID", req.UUID[:])    k.Stringer("id", id)         k.Text("at", at)
//	k.Time("at", at)                    k.Time("req.At", *req.At)    k.Time("d", time.Time(d))
func (mg *methodGen) encode(s *source, p annotations.KeyPart, v string) (string, error) {
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
		return "", fmt.Errorf("%s: key part %s has unknown encoding %d", p.Pos, p.Expr, p.Encoding)
	}
	arg, err := mg.conv(s, v, p.Conv)
	if err != nil {
		return "", err
	}
	if named {
		arg = strconv.Quote(p.Expr) + ", " + arg
	}
	return mg.k + "." + adder + "(" + arg + ")", nil
}

// conv applies a conversion to the value v: *v, &v, v[:], string(v), T(v).
func (g *gen) conv(s *source, v string, c annotations.Conversion) (string, error) {
	if c.Deref {
		v = "*" + v
	}
	if c.Addr {
		v = "&" + v
	}
	if c.Slice {
		v += "[:]"
	}
	if c.ViaString {
		v = "string(" + v + ")"
	}
	if c.To != nil {
		t, err := g.typeCode(s, c.To)
		if err != nil {
			return "", err
		}
		v = t + "(" + v + ")"
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
func (mg *methodGen) fingerprint(s *source) error {
	s.line("var ", mg.h, " ", mg.rt("Hasher"))
	for _, hp := range mg.m.Fingerprint {
		name := mg.pnames[hp.Param]
		if hp.NilCheck {
			s.open("if ", name, " == nil {")
			s.line(mg.h, ".Nil()")
			s.indent--
			s.open("} else {")
		}
		for _, hv := range hp.Values {
			v := name
			if hv.Field != "" {
				v += "." + hv.Field
			}
			arg, err := mg.conv(s, v, hv.Conv)
			if err != nil {
				return mg.errorf("fingerprint of %s: %v", name, err)
			}
			s.line(mg.h, ".", hv.Adder, "(", arg, ")")
		}
		if hp.NilCheck {
			s.close("}")
		}
	}
	return nil
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
func (mg *methodGen) call(s *source) error {
	m := mg.m
	ctx := mg.pnames[0]
	args := make([]string, len(mg.pnames))
	for i, name := range mg.pnames {
		if mg.variadic() && i == len(m.Params)-1 {
			name += "..."
		}
		args[i] = name
	}
	inner := mg.recv + "." + mg.inner() + "." + m.Name + "(" + strings.Join(args, ", ") + ")"
	result := "struct{}"
	if m.Result != nil {
		var err error
		if result, err = mg.typeCode(s, m.Result); err != nil {
			return mg.errorf("result: %v", err)
		}
	}
	do := mg.rt("Do") + "(" + ctx + ", " + mg.recv + "." + mg.field + ", &" + mg.desc + ", &" + mg.k + ", &" + mg.h +
		", func(" + ctx + " " + mg.qual(contextPath, "Context") + ") (" + result + ", error) {"
	if m.Result != nil {
		s.open("return ", do)
		s.line("return ", inner)
		s.close("})")
		return nil
	}
	s.open("_, ", mg.err, " := ", do)
	s.line("return struct{}{}, ", inner)
	s.close("})")
	s.line("return ", mg.err)
	return nil
}
