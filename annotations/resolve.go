package annotations

import (
	"cmp"
	"errors"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"math"
	"math/bits"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ResolvePackage finds the //idem: annotations of a type-checked package and
// resolves them into the model templates emit code from. It returns
// (nil, nil) when the package has no annotation. Otherwise it returns the
// Package, or an ErrorList holding every mistake found (sorted, each
// "file:line:col: message"); the Package is nil whenever there are errors.
//
// files are the package's syntax trees, type-checked into pkg and info
// (Defs, Uses, Types and Implicits are read).
func ResolvePackage(fset *token.FileSet, files []*ast.File, pkg *types.Package, info *types.Info) (*Package, error) {
	r := &resolver{errs: errs{fset: fset}, pkg: pkg, info: info, files: files, types: map[*types.TypeName]*typeEntry{}}
	any := false
	for _, f := range files {
		anns, err := ScanFile(fset, f)
		if l := ErrorList(nil); errors.As(err, &l) {
			r.list = append(r.list, l...)
		}
		for _, a := range anns {
			any = true
			r.collect(f, a)
		}
	}
	if !any && len(r.list) == 0 {
		return nil, nil
	}
	r.checkShadowedUniverse()
	p := &Package{Name: pkg.Name(), Path: pkg.Path()}
	if len(files) > 0 {
		p.Dir = filepath.Dir(fset.Position(files[0].Package).Filename)
	}
	entries := make([]*typeEntry, 0, len(r.types))
	for _, e := range r.types {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b *typeEntry) int { return r.comparePos(a.obj.Pos(), b.obj.Pos()) })
	for _, e := range entries {
		if t := r.resolveType(e); t != nil {
			p.Types = append(p.Types, t)
		}
	}
	r.checkOps(p)
	if len(r.list) > 0 {
		return nil, r.err()
	}
	return p, nil
}

// checkShadowedUniverse refuses a package-level declaration of a
// predeclared type name or nil: generated code spells types with them
// (error, string, int64, []byte, and any type of the signatures written by
// another package) and cannot qualify them, so in this package they would
// mean the package's own declaration. An alias of the same type (type any =
// interface{}) changes nothing and is accepted.
func (r *resolver) checkShadowedUniverse() {
	for _, name := range r.pkg.Scope().Names() {
		u := types.Universe.Lookup(name)
		if u == nil {
			continue
		}
		if _, isType := u.(*types.TypeName); !isType && name != "nil" {
			continue
		}
		obj := r.pkg.Scope().Lookup(name)
		if tn, ok := obj.(*types.TypeName); ok && tn.IsAlias() && types.Identical(tn.Type(), u.Type()) {
			continue // type any = interface{}: the same type either way
		}
		r.add(obj.Pos(), "package-level %s shadows the predeclared %s, which generated code refers to and cannot qualify; rename it", name, name)
	}
}

type resolver struct {
	errs
	pkg   *types.Package
	info  *types.Info
	files []*ast.File
	types map[*types.TypeName]*typeEntry
	// ops maps each Method to where its op was written (or its spec, for a
	// default op), for the duplicate-op error.
	opPos map[*Method]token.Pos
	// errorVars are the package's exported error variables declared in
	// files without build constraints, in name order, for sentinels;
	// errorVarsDone once they are listed.
	errorVars     []*types.Var
	errorVarsDone bool
	// selfFP memoizes selfFingerprinting.
	selfFP map[types.Type]bool
}

type typeEntry struct {
	obj      *types.TypeName
	defaults *Annotation
	methods  []methodEntry
}

type methodEntry struct {
	ann  *Annotation
	file *ast.File
	fn   *types.Func
}

// comparePos orders positions by file name, then offset.
func (r *resolver) comparePos(a, b token.Pos) int {
	pa, pb := r.fset.Position(a), r.fset.Position(b)
	return cmp.Or(cmp.Compare(pa.Filename, pb.Filename), cmp.Compare(pa.Offset, pb.Offset))
}

func (r *resolver) entry(obj *types.TypeName) *typeEntry {
	e := r.types[obj]
	if e == nil {
		e = &typeEntry{obj: obj}
		r.types[obj] = e
	}
	return e
}

// collect files an annotation under its type.
func (r *resolver) collect(f *ast.File, a *Annotation) {
	switch {
	case a.Decl != nil:
		fn, _ := r.info.Defs[a.Decl.Name].(*types.Func)
		if fn == nil {
			r.add(a.Decl.Name.Pos(), "no type information for method %s", a.Decl.Name.Name)
			return
		}
		recv := fn.Type().(*types.Signature).Recv()
		t := types.Unalias(recv.Type())
		if p, ok := t.(*types.Pointer); ok {
			t = types.Unalias(p.Elem())
		}
		named, ok := t.(*types.Named)
		if !ok {
			r.add(a.Decl.Name.Pos(), "no type information for the receiver of %s", a.Decl.Name.Name)
			return
		}
		e := r.entry(named.Obj())
		e.methods = append(e.methods, methodEntry{ann: a, file: f, fn: fn})
	case a.Field != nil:
		fn, _ := r.info.Defs[a.Field.Names[0]].(*types.Func)
		obj, _ := r.info.Defs[a.Type.Name].(*types.TypeName)
		if fn == nil || obj == nil {
			r.add(a.Field.Pos(), "no type information for method %s", a.Field.Names[0].Name)
			return
		}
		e := r.entry(obj)
		e.methods = append(e.methods, methodEntry{ann: a, file: f, fn: fn})
	default:
		obj, _ := r.info.Defs[a.Type.Name].(*types.TypeName)
		if obj == nil {
			r.add(a.Type.Name.Pos(), "no type information for type %s", a.Type.Name.Name)
			return
		}
		e := r.entry(obj)
		if e.defaults != nil {
			r.add(a.Spec.Pos, "repeated //idem:defaults for type %s", obj.Name())
			return
		}
		e.defaults = a
	}
}

func (r *resolver) resolveType(e *typeEntry) *Type {
	obj := e.obj
	if e.defaults != nil {
		if len(e.methods) == 0 {
			r.add(e.defaults.Spec.Pos, "//idem:defaults on type %s, which has no annotated method: defaults apply only to methods with their own //idem: line", obj.Name())
		}
		if op := e.defaults.Spec.Op; op != nil {
			r.add(op.NamePos, "op cannot be a type default: each method needs its own operation name")
		}
	}
	if obj.IsAlias() {
		r.add(obj.Pos(), "type %s is an alias: annotate the methods of the type it names", obj.Name())
		return nil
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		return nil
	}
	if named.TypeParams().Len() > 0 {
		r.add(obj.Pos(), "type %s is generic: idemgen does not wrap generic types", obj.Name())
		return nil
	}
	if len(e.methods) == 0 {
		return nil
	}
	_, iface := named.Underlying().(*types.Interface)
	t := &Type{Name: obj.Name(), Interface: iface, Pos: r.fset.Position(obj.Pos()), Obj: obj}
	slices.SortFunc(e.methods, func(a, b methodEntry) int { return r.comparePos(a.fn.Pos(), b.fn.Pos()) })
	for _, me := range e.methods {
		// A method whose annotation (or defaults) had parse errors is
		// resolved too, with the options that parsed, so that every mistake
		// is reported at once; failed says which options to keep quiet
		// about, and the method is not generated.
		spec, bad, failed := me.ann.Spec, me.ann.bad, me.ann.failed
		if e.defaults != nil {
			spec = merge(e.defaults.Spec, spec)
			bad = bad || e.defaults.bad || e.defaults.Spec.Op != nil
			failed = failed.union(e.defaults.failed)
		}
		n0 := len(r.list)
		if m := r.resolveMethod(t, me, spec, failed); m != nil && !bad {
			t.Methods = append(t.Methods, m)
		}
		if e.defaults != nil {
			r.nameMethod(r.list[n0:], e.defaults, obj, me.fn)
		}
	}
	return t
}

// nameMethod names the method in the errors of list raised at the type's
// //idem:defaults: one line of defaults applies to several methods, and
// the error would not say which one it failed for.
func (r *resolver) nameMethod(list ErrorList, defaults *Annotation, obj *types.TypeName, fn *types.Func) {
	from, to := r.fset.Position(defaults.Spec.Pos), r.fset.Position(obj.Pos())
	name := obj.Name() + "." + fn.Name()
	for _, e := range list {
		if e.Pos.Filename != from.Filename || e.Pos.Line < from.Line || e.Pos.Line >= to.Line {
			continue
		}
		if strings.Contains(e.Msg, name) {
			e.Msg += " (from the //idem:defaults of " + obj.Name() + ")"
		} else {
			e.Msg = "for method " + name + " (from the //idem:defaults of " + obj.Name() + "): " + e.Msg
		}
	}
}

// merge returns own with every option it lacks taken from defaults.
func merge(defaults, own *Spec) *Spec {
	s := *own
	s.Key = cmp.Or(s.Key, defaults.Key)
	s.TTL = cmp.Or(s.TTL, defaults.TTL)
	s.Retries = cmp.Or(s.Retries, defaults.Retries)
	s.Timeout = cmp.Or(s.Timeout, defaults.Timeout)
	s.Backoff = cmp.Or(s.Backoff, defaults.Backoff)
	s.Downstream = cmp.Or(s.Downstream, defaults.Downstream)
	s.Margin = cmp.Or(s.Margin, defaults.Margin)
	s.Lease = cmp.Or(s.Lease, defaults.Lease)
	s.Inflight = cmp.Or(s.Inflight, defaults.Inflight)
	s.Hash = cmp.Or(s.Hash, defaults.Hash)
	s.Final = cmp.Or(s.Final, defaults.Final)
	s.Codec = cmp.Or(s.Codec, defaults.Codec)
	s.Renew = cmp.Or(s.Renew, defaults.Renew)
	return &s
}

func (r *resolver) typeString(t types.Type) string {
	return types.TypeString(t, types.RelativeTo(r.pkg))
}

// shortType writes t with package names rather than paths: *dep.Req.
func (r *resolver) shortType(t types.Type) string {
	return types.TypeString(t, func(p *types.Package) string {
		if p == r.pkg {
			return ""
		}
		return p.Name()
	})
}

// resolveMethod resolves one method's spec; failed names the options of
// spec that were written but did not parse, whose absence is not reported.
func (r *resolver) resolveMethod(t *Type, me methodEntry, spec *Spec, failed failedSet) *Method {
	fn := me.fn
	sig := fn.Type().(*types.Signature)
	m := &Method{
		Name:     fn.Name(),
		Op:       r.pkg.Path() + "." + t.Name + "." + fn.Name(),
		FuncName: r.pkg.Path() + "." + t.Name + "." + fn.Name(),
		Pos:      r.fset.Position(fn.Pos()),
		Func:     fn,
		Sig:      sig,
	}
	if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
		m.FuncName = r.pkg.Path() + ".(*" + t.Name + ")." + fn.Name()
	}
	n0 := len(r.list)
	where := fmt.Sprintf("method %s.%s", t.Name, fn.Name())

	// Shape.
	params := sig.Params()
	hasCtx := params.Len() > 0 && isContext(params.At(0).Type())
	if !hasCtx {
		r.add(fn.Pos(), "%s: the first parameter must be a context.Context", where)
	}
	if sig.Variadic() {
		r.add(fn.Pos(), "%s is variadic: idemgen does not wrap variadic methods (take a slice instead)", where)
	}
	res := sig.Results()
	switch {
	case res.Len() == 1 && isError(res.At(0).Type()):
	case res.Len() == 2 && isError(res.At(1).Type()):
		m.Result = res.At(0).Type()
		if spec.Codec == nil && !failed.has("codec") || spec.Codec != nil && !spec.Codec.Custom {
			r.checkResult(fn.Pos(), where, m.Result)
		}
	default:
		r.add(fn.Pos(), "%s must return (T, error) or error", where)
	}
	taken := map[string]bool{}
	for i := range params.Len() {
		taken[params.At(i).Name()] = true
	}
	for i := range params.Len() {
		v := params.At(i)
		name := v.Name()
		if name == "" || name == "_" {
			name = "p" + strconv.Itoa(i)
			for taken[name] {
				name += "_"
			}
			taken[name] = true
		}
		m.Params = append(m.Params, Param{Name: name, Type: v.Type()})
	}
	// paramIndex finds a parameter by the name written in the source.
	paramIndex := func(name string) int {
		for i := range params.Len() {
			if params.At(i).Name() == name && name != "_" {
				return i
			}
		}
		return -1
	}

	// Key.
	switch {
	case spec.Key != nil:
		r.resolveKey(m, t.Name, spec.Key, hasCtx, paramIndex, failed.has("key"))
	case !failed.has("key"):
		r.add(spec.Pos, "missing key: write key=<parameter path> (e.g. key=req.ID), on the method or in the type's //idem:defaults")
	}

	// Hash.
	switch {
	case spec.Hash == nil:
		for i := range params.Len() {
			if i == 0 && hasCtx {
				continue
			}
			m.Hash = append(m.Hash, i)
		}
	case spec.Hash.None:
		m.HashNone = true
	default:
		for _, n := range spec.Hash.Names {
			i := paramIndex(n.Name)
			switch {
			case i < 0:
				r.add(n.Pos, "hash: %s is not a parameter of %s.%s%s", n.Name, t.Name, fn.Name(), r.suggestParam(params, n.Name))
			case i == 0 && hasCtx:
				r.add(n.Pos, "hash: %s is the context, which is never hashed", n.Name)
			default:
				m.Hash = append(m.Hash, i)
			}
		}
		slices.Sort(m.Hash)
	}
	blind := map[int][]blindSpot{}
	for _, i := range m.Hash {
		if spec.Hash == nil && failed.has("hash") {
			break // every parameter is hashed only because hash= did not parse
		}
		if spots := r.fingerprintCheck(m.Params[i].Name, params.At(i).Type()); len(spots) > 0 {
			blind[i] = spots
		}
	}
	for _, i := range m.Hash {
		b, ok := blind[i]
		if !ok {
			continue
		}
		pos := params.At(i).Pos()
		if spec.Hash != nil {
			for _, n := range spec.Hash.Names {
				if n.Name == params.At(i).Name() {
					pos = n.Pos
				}
			}
		}
		r.add(pos, "%s: parameter %s cannot be fingerprinted: %s; %s", where, m.Params[i].Name, describeSpots(b), r.fingerprintWayOut(m, i, blind))
	}

	for _, i := range m.Hash {
		m.Fingerprint = append(m.Fingerprint, r.hashPlan(i, m.Params[i].Type))
	}
	m.Scheme = r.scheme(m)
	if len(m.Fingerprint) > 0 {
		m.Layout = r.layoutHash(m)
	}

	// Final.
	if spec.Final != nil {
		for _, n := range spec.Final.Names {
			if v := r.resolveFinal(me.file, n); v != nil {
				m.Final = append(m.Final, FinalRef{Name: n.String(), Var: v})
			}
		}
	}

	m.Sentinels = r.sentinels(m.Final)
	r.resolveTimes(m, spec, failed)

	if r.opPos == nil {
		r.opPos = map[*Method]token.Pos{}
	}
	r.opPos[m] = fn.Pos()
	switch {
	case spec.Op != nil:
		m.Op = spec.Op.Text
		r.opPos[m] = spec.Op.ValuePos
		if len(m.Op) > MaxOpLen {
			r.add(spec.Op.ValuePos, "op=%.32s… is %d bytes, more than idem.MaxOpLen (%d)", m.Op, len(m.Op), MaxOpLen)
		}
	case r.pkg.Path() == "command-line-arguments":
		r.add(fn.Pos(), "%s: the package was loaded from a list of files and has no import path, which the default operation name needs "+
			"(it would change with the way idemgen is run): run idemgen on the package's directory or import path, or give op=", where)
	case len(m.Op) > MaxOpLen:
		r.add(fn.Pos(), "%s: the default operation name %.32s… is %d bytes, more than idem.MaxOpLen (%d): give a shorter op=", where, m.Op, len(m.Op), MaxOpLen)
	}
	m.OpPos = r.fset.Position(r.opPos[m])
	if len(r.list) > n0 {
		return nil
	}
	return m
}

// checkResult reports, in one error at pos, every field of the result type
// that keeps it from round-tripping through the JSON codec.
func (r *resolver) checkResult(pos token.Pos, where string, result types.Type) {
	c := &codecCheck{r: r, seen: map[types.Type]bool{}}
	msgs := c.check(result)
	if len(msgs) == 0 {
		return
	}
	what := msgs[0]
	if len(msgs) > 1 {
		var b strings.Builder
		for i, msg := range msgs {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "(%d) %s", i+1, msg)
		}
		what = fmt.Sprintf("%d problems: %s", len(msgs), b.String())
	}
	r.add(pos, "%s: result type %s cannot round-trip through the JSON codec: %s; if the executor has a codec that carries it (idem.WithCodec), say so with codec=custom", where, r.typeString(result), what)
}

func (r *resolver) suggestParam(params *types.Tuple, name string) string {
	var names []string
	for i := range params.Len() {
		if n := params.At(i).Name(); n != "" && n != "_" {
			names = append(names, n)
		}
	}
	if best := nearest(name, names); best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	if len(names) == 0 {
		return " (its parameters are unnamed)"
	}
	return " (parameters: " + strings.Join(names, ", ") + ")"
}

// resolveKey binds the operands of k; partial is set when some operands of
// k did not parse (k holds the others).
func (r *resolver) resolveKey(m *Method, typeName string, k *KeyExpr, hasCtx bool, paramIndex func(string) int, partial bool) {
	params := m.Sig.Params()
	n0 := len(r.list)
	hasParam := false
	for _, op := range k.Operands {
		part := KeyPart{Expr: op.Text, Pos: r.fset.Position(op.Pos)}
		if op.Literal {
			part.Kind, part.Literal = PartLiteral, op.Value
			m.Key = append(m.Key, part)
			continue
		}
		root := op.Path[0]
		i := paramIndex(root.Name)
		if i < 0 {
			if len(op.Path) == 1 && !root.Call && (root.Name == "op" || root.Name == "tenant") {
				part.Kind = PartOp
				if root.Name == "tenant" {
					part.Kind = PartTenant
				}
				m.Key = append(m.Key, part)
				continue
			}
			if len(op.Path) == 1 && !root.Call && root.Name == "clientkey" {
				// The caller's idempotency key tells calls apart as a
				// parameter does; it is read from the context (the first
				// parameter, which the shape check requires).
				part.Kind = PartClientKey
				hasParam = true
				m.Key = append(m.Key, part)
				continue
			}
			r.add(root.Pos, "key: %s is not a parameter of %s.%s%s", root.Name, typeName, m.Name, r.suggestParam(params, root.Name))
			continue
		}
		if i == 0 && hasCtx {
			r.add(root.Pos, "key: %s is the context; it cannot be a key part", root.Name)
			continue
		}
		if root.Call {
			r.add(root.Pos, "key: %s is a parameter, not a method: drop the ()", root.Name)
			continue
		}
		hasParam = true
		part.Kind, part.Param = PartPath, i
		if r.resolvePath(&part, op, params.At(i).Type()) {
			m.Key = append(m.Key, part)
		}
	}
	if !hasParam && len(r.list) == n0 && !partial {
		r.add(k.ValuePos, "key %s has no parameter part: every call would share one record; add a parameter path (e.g. req.ID)", k.Text)
	}
}

func nilable(t types.Type) bool {
	switch t.Underlying().(type) {
	case *types.Pointer, *types.Interface:
		return true
	}
	return false
}

func deref(t types.Type) types.Type {
	if p, ok := t.Underlying().(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

// resolvePath walks the selectors of a path operand from the parameter's
// type, filling part.Steps, part.Type and part.Encoding.
func (r *resolver) resolvePath(part *KeyPart, op Operand, cur types.Type) bool {
	addressable := true
	for _, sel := range op.Path[1:] {
		obj, index, indirect := types.LookupFieldOrMethod(cur, addressable, r.pkg, sel.Name)
		if obj == nil {
			switch {
			case index != nil:
				r.add(sel.Pos, "key: %s is ambiguous in %s (several embedded fields have it)", sel.Name, r.typeString(cur))
			case indirect:
				r.add(sel.Pos, "key: method %s has a pointer receiver, and the %s value it would be called on is not addressable", sel.Name, r.typeString(cur))
			case r.unexportedMember(cur, sel.Name) != nil:
				p := r.unexportedMember(cur, sel.Name)
				r.add(sel.Pos, "key: %s has a field or method %s, but it is unexported in package %s, so the generated wrapper cannot read it; "+
					"key on an exported field or method of %s", r.shortType(cur), sel.Name, p.Path(), r.shortType(cur))
			default:
				r.add(sel.Pos, "key: %s has no field or method %s%s", r.typeString(cur), sel.Name, r.suggestMember(cur, sel.Name))
			}
			return false
		}
		// Expand fields promoted through embedded structs, so a nil
		// embedded pointer on the way is checked too. An embedded field
		// the package cannot name (unexported, of another package) is
		// left implicit, as in the promoted selector req.ID; the nil check
		// its value would need cannot be written, so a pointer there is
		// refused.
		pendingNil := false
		for _, idx := range index[:len(index)-1] {
			st, ok := deref(cur).Underlying().(*types.Struct)
			if !ok {
				break
			}
			f := st.Field(idx)
			if _, isPtr := cur.Underlying().(*types.Pointer); isPtr {
				addressable = true
			}
			if !f.Exported() && f.Pkg() != r.pkg {
				if nilable(f.Type()) {
					r.add(sel.Pos, "key: %s is promoted through the embedded %s of %s, unexported in package %s: "+
						"the generated code can neither name it nor check it for nil; key on a field reachable without it, "+
						"or on a method of %s that returns the value", sel.Name, r.shortType(f.Type()), r.shortType(deref(cur)),
						f.Pkg().Path(), r.shortType(deref(cur)))
					return false
				}
				pendingNil = pendingNil || nilable(cur)
				cur = f.Type()
				continue
			}
			part.Steps = append(part.Steps, Step{Name: f.Name(), NilCheck: pendingNil || nilable(cur), Type: f.Type()})
			pendingNil = false
			cur = f.Type()
		}
		step := Step{Name: sel.Name, NilCheck: pendingNil || nilable(cur)}
		switch obj := obj.(type) {
		case *types.Var:
			if sel.Call {
				r.add(sel.Pos, "key: %s is a field, not a method: drop the ()", sel.Name)
				return false
			}
			if _, isPtr := cur.Underlying().(*types.Pointer); isPtr {
				addressable = true
			}
			cur = obj.Type()
		case *types.Func:
			if !sel.Call {
				r.add(sel.Pos, "key: %s is a method: call it, %s()", sel.Name, sel.Name)
				return false
			}
			msig := obj.Type().(*types.Signature)
			if msig.Params().Len() != 0 || msig.Results().Len() != 1 || isError(msig.Results().At(0).Type()) {
				r.add(sel.Pos, "key: method %s must take no arguments and return one value that is not an error", sel.Name)
				return false
			}
			step.Method = true
			cur = msig.Results().At(0).Type()
			addressable = false
		}
		step.Type = cur
		part.Steps = append(part.Steps, step)
	}
	enc, msg := r.keyEncoding(cur, addressable)
	if msg != "" {
		r.add(op.Pos, "key: %s has type %s, which is not key-able: %s", op.Text, r.typeString(cur), msg)
		return false
	}
	part.Type, part.Encoding = cur, enc
	part.NilCheck = nilable(cur)
	part.Conv = keyConversion(cur, enc)
	return true
}

// suggestMember suggests a field or method of t near name, among those the
// package can use.
func (r *resolver) suggestMember(t types.Type, name string) string {
	var names []string
	usable := func(o types.Object) bool { return o.Exported() || o.Pkg() == r.pkg }
	if st, ok := deref(t).Underlying().(*types.Struct); ok {
		for i := range st.NumFields() {
			if f := st.Field(i); usable(f) {
				names = append(names, f.Name())
			}
		}
	}
	ms := types.NewMethodSet(types.NewPointer(deref(t)))
	if _, isIface := t.Underlying().(*types.Interface); isIface {
		ms = types.NewMethodSet(t)
	}
	for i := range ms.Len() {
		if o := ms.At(i).Obj(); usable(o) {
			names = append(names, o.Name())
		}
	}
	if best := nearest(name, names); best != "" {
		return fmt.Sprintf("; did you mean %s?", best)
	}
	return ""
}

// unexportedMember returns the package of an unexported field or method
// name of t that the package cannot use, or nil.
func (r *resolver) unexportedMember(t types.Type, name string) *types.Package {
	if token.IsExported(name) {
		return nil
	}
	n, ok := types.Unalias(deref(t)).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg() == r.pkg {
		return nil
	}
	if obj, _, _ := types.LookupFieldOrMethod(t, true, n.Obj().Pkg(), name); obj != nil {
		return n.Obj().Pkg()
	}
	return nil
}

// The interfaces key-ability and codec checks look for, built structurally
// so this package needs no import of fmt or encoding in the checked code.
var (
	byteSlice   = types.NewSlice(types.Typ[types.Byte])
	errorType   = types.Universe.Lookup("error").Type()
	stringerT   = iface("String", nil, types.Typ[types.String])
	textMarshal = iface("MarshalText", nil, byteSlice, errorType)
	textUnmarsh = iface("UnmarshalText", []types.Type{byteSlice}, errorType)
	jsonMarshal = iface("MarshalJSON", nil, byteSlice, errorType)
	jsonUnmarsh = iface("UnmarshalJSON", []types.Type{byteSlice}, errorType)
)

func iface(name string, params []types.Type, results ...types.Type) *types.Interface {
	tuple := func(ts []types.Type) *types.Tuple {
		vs := make([]*types.Var, len(ts))
		for i, t := range ts {
			vs[i] = types.NewParam(token.NoPos, nil, "", t)
		}
		return types.NewTuple(vs...)
	}
	sig := types.NewSignatureType(nil, nil, nil, tuple(params), tuple(results), false)
	it := types.NewInterfaceType([]*types.Func{types.NewFunc(token.NoPos, nil, name, sig)}, nil)
	it.Complete()
	return it
}

func isError(t types.Type) bool { return types.Identical(t, errorType) }

func isContext(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "context" && n.Obj().Name() == "Context"
}

// keyEncoding returns how a value of type t is added to a key, preferring a
// basic kind (a `type OrderID string` with a String method is a string),
// then a byte array, fmt.Stringer and encoding.TextMarshaler. A String or
// MarshalText method with a pointer receiver is accepted when the value is
// addressable (a parameter, or a field reached from one without a method
// call): the wrapper takes its address.
func (r *resolver) keyEncoding(t types.Type, addressable bool) (Encoding, string) {
	if enc, msg, ok := r.canonicalKey(t, addressable); ok {
		return enc, msg
	}
	u := t.Underlying()
	if b, ok := u.(*types.Basic); ok {
		info := b.Info()
		switch {
		case info&types.IsString != 0:
			return EncString, ""
		case info&types.IsInteger != 0 && info&types.IsUnsigned != 0:
			return EncUint, ""
		case info&types.IsInteger != 0:
			return EncInt, ""
		case info&types.IsBoolean != 0:
			return EncBool, ""
		}
	}
	if a, ok := u.(*types.Array); ok {
		if b, ok := a.Elem().Underlying().(*types.Basic); ok && b.Kind() == types.Byte {
			return EncBytes, ""
		}
	}
	if types.Implements(t, stringerT) {
		return EncStringer, ""
	}
	if types.Implements(t, textMarshal) {
		return EncTextMarshal, ""
	}
	if !nilable(t) {
		ptr := types.NewPointer(t)
		switch {
		case types.Implements(ptr, stringerT) && addressable:
			return EncStringer, ""
		case types.Implements(ptr, textMarshal) && addressable:
			return EncTextMarshal, ""
		case types.Implements(ptr, stringerT):
			return 0, "its String method has a pointer receiver and the value, a method's result, is not addressable; give String a value receiver"
		case types.Implements(ptr, textMarshal):
			return 0, "its MarshalText method has a pointer receiver and the value, a method's result, is not addressable; give MarshalText a value receiver"
		}
	}
	if b, ok := u.(*types.Basic); ok && b.Info()&types.IsFloat != 0 {
		return 0, "floating-point values make unstable keys; use an integer, a string or a Stringer"
	}
	return 0, "a key part must be a string or integer kind, bool, a byte array, fmt.Stringer or encoding.TextMarshaler"
}

// resolveFinal binds a final= name to a package-level error variable.
func (r *resolver) resolveFinal(file *ast.File, n Name) *types.Var {
	scope := r.pkg.Scope()
	from := "package " + r.pkg.Name()
	if n.Qual != "" {
		var imported *types.Package
		for _, imp := range file.Imports {
			var pn *types.PkgName
			if imp.Name != nil {
				pn, _ = r.info.Defs[imp.Name].(*types.PkgName)
			} else {
				pn, _ = r.info.Implicits[imp].(*types.PkgName)
			}
			if pn != nil && pn.Name() == n.Qual {
				imported = pn.Imported()
				break
			}
		}
		if imported == nil {
			r.add(n.Pos, "final: package %s is not imported by %s; import it there", n.Qual, filepath.Base(r.fset.Position(file.Package).Filename))
			return nil
		}
		if !token.IsExported(n.Name) {
			r.add(n.Pos, "final: %s is not exported", n)
			return nil
		}
		scope = imported.Scope()
		from = "package " + imported.Path()
	}
	obj := scope.Lookup(n.Name)
	if obj == nil {
		r.add(n.Pos, "final: %s is not declared in %s; final lists sentinel error variables", n, from)
		return nil
	}
	v, ok := obj.(*types.Var)
	if !ok {
		kind := "type"
		switch obj.(type) {
		case *types.Const:
			kind = "constant"
		case *types.Func:
			kind = "function"
		}
		r.add(n.Pos, "final: %s is a %s, not a variable; final lists sentinel error variables", n, kind)
		return nil
	}
	if !types.Implements(v.Type(), errorType.Underlying().(*types.Interface)) {
		r.add(n.Pos, "final: %s has type %s, which is not an error", n, r.typeString(v.Type()))
		return nil
	}
	return v
}

// resolveTimes sets TTL, Budget, Lease, Inflight and Wait. With a budget
// option in failed, the budget is neither derived nor checked; with ttl in
// failed, nothing is compared with the ttl.
func (r *resolver) resolveTimes(m *Method, s *Spec, failed failedSet) {
	var budgetOpt *Opt
	budgetFailed := false
	for _, opt := range options {
		if o := opt.get(s); opt.budget && o != nil && (budgetOpt == nil || o.NamePos < budgetOpt.NamePos) {
			budgetOpt = o
		}
		budgetFailed = budgetFailed || opt.budget && failed.has(opt.name)
	}
	var total time.Duration
	budgetOK := false
	if budgetOpt != nil && !budgetFailed {
		if s.Retries == nil || s.Timeout == nil {
			r.add(budgetOpt.NamePos, "a retry budget needs both retries and timeout (backoff, downstream and margin default to 0)")
		} else {
			b := &Budget{Retries: s.Retries.N, Timeout: s.Timeout.D}
			if s.Backoff != nil {
				b.Backoff = s.Backoff.D
			}
			if s.Downstream != nil {
				b.Downstream = s.Downstream.D
			}
			if s.Margin != nil {
				b.Margin = s.Margin.D
			}
			var ok bool
			if total, ok = budgetTotal(b); !ok {
				r.add(budgetOpt.NamePos, "the retry budget %s overflows", budgetFormula(s))
			} else {
				m.Budget = b
				budgetOK = true
			}
		}
	}
	switch {
	case s.TTL != nil:
		m.TTL = s.TTL.D
		if budgetOK && m.TTL < total {
			r.add(s.TTL.NamePos, "ttl=%s is shorter than the retry budget %s = %s", s.TTL.Text, FormatDuration(total), budgetFormula(s))
		}
	case budgetOK:
		m.TTL = total
		if total <= 0 {
			r.add(budgetOpt.NamePos, "the retry budget %s is 0: give ttl=<duration>", budgetFormula(s))
		}
	case budgetOpt == nil && !budgetFailed && !failed.has("ttl"):
		r.add(s.Pos, "missing ttl: give ttl=<duration>, or the retry budget (retries and timeout; backoff, downstream, margin) to derive it")
	}
	if s.Lease != nil {
		m.Lease = s.Lease.D
		switch {
		case m.TTL <= 0 || failed.has("ttl"):
		case s.TTL != nil && m.Lease > m.TTL:
			r.add(s.Lease.NamePos, "lease=%s is longer than ttl=%s", s.Lease.Text, s.TTL.Text)
		case s.TTL == nil && m.Lease > m.TTL:
			r.add(s.Lease.NamePos, "lease=%s is longer than the ttl %s derived from the retry budget", s.Lease.Text, FormatDuration(m.TTL))
		}
	}
	m.Renew = s.Renew != nil && s.Renew.B
	if s.Lease != nil && s.Timeout != nil && !m.Renew && s.Lease.D < s.Timeout.D && !failed.has("timeout") && !failed.has("lease") {
		r.add(s.Lease.NamePos, "lease=%s is shorter than timeout=%s, the time one attempt may run: a call still running when its lease lapses "+
			"is taken over by a retry and runs a second time; give lease=%s or longer, or renew=true (the lease is renewed while the method runs)",
			s.Lease.Text, s.Timeout.Text, s.Timeout.Text)
	}
	if s.Inflight != nil && s.Inflight.Wait {
		m.Inflight, m.Wait = InflightWait, s.Inflight.D
	}
}

// budgetTotal is Budget.Total, reporting overflow.
func budgetTotal(b *Budget) (time.Duration, bool) {
	per, carry := bits.Add64(uint64(b.Timeout), uint64(b.Backoff), 0)
	hi, lo := bits.Mul64(per, uint64(b.Retries))
	if carry != 0 || hi != 0 {
		return 0, false
	}
	sum, c1 := bits.Add64(lo, uint64(b.Downstream), 0)
	sum, c2 := bits.Add64(sum, uint64(b.Margin), 0)
	if c1 != 0 || c2 != 0 || sum > math.MaxInt64 {
		return 0, false
	}
	return time.Duration(sum), true
}

// budgetFormula writes the budget as the annotation states it, with each
// duration as written: "2×(2s+500ms)+120s+30s".
func budgetFormula(s *Spec) string {
	var b strings.Builder
	b.WriteString(s.Retries.Text)
	b.WriteString("×")
	if s.Backoff != nil {
		b.WriteString("(" + s.Timeout.Text + "+" + s.Backoff.Text + ")")
	} else {
		b.WriteString(s.Timeout.Text)
	}
	if s.Downstream != nil {
		b.WriteString("+" + s.Downstream.Text)
	}
	if s.Margin != nil {
		b.WriteString("+" + s.Margin.Text)
	}
	return b.String()
}

// FormatDuration writes d in the largest unit that divides it: 155s, 2m,
// 36h, 7d, 1500ms. It is the one spelling of a duration in idemgen's
// messages and in the documentation of generated code, and it parses back
// as an annotation duration.
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	units := []struct {
		d    time.Duration
		name string
	}{
		{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"},
		{time.Millisecond, "ms"}, {time.Microsecond, "µs"},
	}
	for _, u := range units {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// MaxOpLen is the longest operation name a store accepts, in bytes: the
// runtime's idem.MaxOpLen (a test keeps them equal).
const MaxOpLen = 1024

// checkOps reports a second method with an op already used in the package.
func (r *resolver) checkOps(p *Package) {
	var all []*Method
	typeOf := map[*Method]string{}
	for _, t := range p.Types {
		all = append(all, t.Methods...)
		for _, m := range t.Methods {
			typeOf[m] = t.Name
		}
	}
	slices.SortFunc(all, func(a, b *Method) int { return r.comparePos(r.opPos[a], r.opPos[b]) })
	first := map[string]*Method{}
	for _, m := range all {
		if f, ok := first[m.Op]; ok {
			at := fmt.Sprintf("%d:%d", f.Pos.Line, f.Pos.Column)
			if p := r.fset.Position(r.opPos[m]); p.Filename != f.Pos.Filename {
				at = filepath.Base(f.Pos.Filename) + ":" + at
			}
			r.add(r.opPos[m], "op %q is already used by %s.%s at %s: give one of them another op=", m.Op, typeOf[f], f.Name, at)
			continue
		}
		first[m.Op] = m
	}
}
