package generate

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/annotations"
	"github.com/idemgen/idemgen/templates"
)

// The generative test builds random service packages from a grammar of Go
// types and annotations and checks the generator's contract on each: either
// the generated file type-checks with the package, or every error is a
// positioned file:line:col. Each case is pure go/types on in-memory sources
// (no go command per case): the standard library and the runtime are loaded
// once from export data.

// generativeSeeds is the number of seeds TestGenerative runs in make test.
const generativeSeeds = 300

// Two packages with the same name, a, that the service imports in
// different files.
const (
	depP = `package a

import "context"

// Doer is an interface a service interface may embed.
type Doer interface {
	Do(ctx context.Context) error
	Name() string
}

// Helper has methods a service struct may promote, one unexported.
type Helper struct{}

func (Helper) Help(n int, rest ...string) string { return "" }

func (*Helper) hidden() {}

type Stamp int64

func (s *Stamp) String() string { return "" }

type Tm struct{ X int }

func (Tm) MarshalText() ([]byte, error) { return nil, nil }

type Ptr struct{ O *T }

func (p Ptr) Get() *T { return p.O }

func (p Ptr) Raw() ID { return ID{} }

type T struct {
	ID string
	N  int
}

type B byte
type ID [4]B
type Bytes []B
type Str string

type base struct {
	ID  string
	Seq int64
}

// Req has fields promoted from an unexported embedded struct.
type Req struct {
	base
	Name string
}

// PReq promotes through an unexported embedded pointer.
type PReq struct {
	*base
	Name string
}

type Inner struct{ ID string }

type Exp struct {
	Inner
	X int
}

type PExp struct{ *Inner }

type List[E any] struct{ Items []E }

type Pair[K comparable, V any] struct {
	K K
	V V
}

type Keyer struct{ id string }

func (k Keyer) Key() string { return k.id }

type WithSecret struct {
	secret string
	Pub    string
}
`
	depQ = `package a

type T struct{ X int }

type ID string
`
)

// genEnv is what every case shares: the imported packages.
type genEnv struct {
	std  map[string]*types.Package // context, errors, time, the runtime...
	p, q *types.Package
}

var (
	genEnvOnce sync.Once
	genEnvVal  *genEnv
	genEnvErr  error
)

func loadGenEnv() (*genEnv, error) {
	genEnvOnce.Do(func() {
		pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedTypes},
			"context", "errors", "time", templates.RuntimePath)
		if err != nil {
			genEnvErr = err
			return
		}
		env := &genEnv{std: map[string]*types.Package{}}
		var visit func(*types.Package)
		visit = func(p *types.Package) {
			if env.std[p.Path()] != nil {
				return
			}
			env.std[p.Path()] = p
			for _, i := range p.Imports() {
				visit(i)
			}
		}
		for _, p := range pkgs {
			if len(p.Errors) > 0 {
				genEnvErr = fmt.Errorf("%s: %v", p.PkgPath, p.Errors)
				return
			}
			visit(p.Types)
		}
		check := func(path, src string) (*types.Package, error) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "/dep/"+path+"/a.go", src, 0)
			if err != nil {
				return nil, err
			}
			return (&types.Config{Importer: env}).Check(path, fset, []*ast.File{f}, nil)
		}
		if env.p, genEnvErr = check("ex.com/p/a", depP); genEnvErr != nil {
			return
		}
		if env.q, genEnvErr = check("ex.com/q/a", depQ); genEnvErr != nil {
			return
		}
		genEnvVal = env
	})
	return genEnvVal, genEnvErr
}

func (e *genEnv) Import(path string) (*types.Package, error) {
	switch path {
	case "ex.com/p/a":
		return e.p, nil
	case "ex.com/q/a":
		return e.q, nil
	}
	if p := e.std[path]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("generative test: no package %q", path)
}

// progGen writes one random service package.
type progGen struct {
	r *rand.Rand
}

// paramNames are drawn for parameters: predeclared identifiers, the
// runtime's and the wrapper's names, package-level and import names, and
// ordinary ones.
var paramNames = []string{
	"string", "error", "int64", "uint64", "bool", "byte", "nil", "any", "int", "len",
	"true", "false", "float64", "make", "new", "panic", "append", "struct_", "comparable",
	"idem", "idemrt", "context", "time", "errors", "ctx", "k", "h", "err", "v", "v2", "w", "wr", "wrapper",
	"next", "ex", "key", "hash", "a", "Order", "S", "B", "Arr", "ErrX", "Svc",
	"IdempotentSvc", "NewIdempotentSvc", "idemSvcM0", "idemSvcM1", "IdempotentÜberweisung",
	"id", "req", "x", "p0", "p1", "Überweisung", "M0", "a2", "Pay", "IdempotentPay", "idemPayPay", "idem2", "context2", "stringArg", "nilArg",
}

// keyable is a parameter type with the key paths it offers; in is "p" or
// "q" when it names package a of that file.
type keyable struct {
	typ   string
	paths []string
	in    string
}

var keyables = []keyable{
	{"string", []string{""}, ""},
	{"int64", []string{""}, ""},
	{"uint8", []string{""}, ""},
	{"bool", []string{""}, ""},
	{"S", []string{""}, ""},
	{"*Order", []string{".ID", ".Seq"}, ""},
	{"Order", []string{".ID"}, ""},
	{"Arr", []string{""}, ""},
	{"Sl", []string{""}, ""},
	{"[16]byte", []string{""}, ""},
	{"[4]B", []string{""}, ""},
	{"a.T", []string{".ID", ".N"}, "p"},
	{"a.T", []string{".X"}, "q"},
	{"a.ID", []string{""}, "p"},
	{"a.ID", []string{""}, "q"},
	{"a.Str", []string{""}, "p"},
	{"a.Req", []string{".ID", ".Seq", ".Name"}, "p"},
	{"*a.Req", []string{".ID", ".Seq"}, "p"},
	{"*a.PReq", []string{".ID", ".Name"}, "p"},
	{"a.Exp", []string{".ID", ".Inner.ID"}, "p"},
	{"*a.PExp", []string{".ID"}, "p"},
	{"a.Keyer", []string{".Key()"}, "p"},
	{"*a.WithSecret", []string{".Pub", ".secret"}, "p"},
	{"*Nested", []string{".O.ID", ".P.ID", ".Deep.ID"}, ""},
	{"*a.Stamp", []string{""}, "p"},
	{"a.Stamp", []string{""}, "p"},
	{"a.Tm", []string{""}, "p"},
	{"*a.Ptr", []string{".Get().ID", ".O.ID", ".Raw()", ".Get().N"}, "p"},
}

func (g *progGen) pick(n int) int { return g.r.IntN(n) }

func (g *progGen) chance(pct int) bool { return g.r.IntN(100) < pct }

// typ returns a random type expression valid in a file of package a = in.
func (g *progGen) typ(depth int, in string) string {
	leaves := []string{"int", "string", "bool", "byte", "error", "any", "int64", "float64",
		"Order", "*Order", "S", "B", "a.T", "a.ID", "Sl", "Arr", "context.Context", "time.Duration"}
	if in == "p" {
		leaves = append(leaves, "a.Req", "*a.PReq", "a.Bytes", "a.List[int]")
	}
	if depth <= 0 || g.chance(35) {
		return leaves[g.pick(len(leaves))]
	}
	e := func() string { return g.typ(depth-1, in) }
	paren := func(s string) string {
		if strings.HasPrefix(s, "<-") {
			return "(" + s + ")"
		}
		return s
	}
	switch g.pick(13) {
	case 0:
		return "*" + e()
	case 1:
		return "[]" + e()
	case 2:
		return fmt.Sprintf("[%d]%s", 1+g.pick(3), e())
	case 3:
		keys := []string{"string", "int", "S", "a.T", "[2]byte", "*Order", "struct{ X int }"}
		return "map[" + keys[g.pick(len(keys))] + "]" + e()
	case 4:
		return "chan " + paren(e())
	case 5:
		return "chan<- " + e()
	case 6:
		return "<-chan " + e()
	case 7:
		return "func(" + e() + ", ..." + e() + ") (" + e() + ", error)"
	case 8:
		return "struct {\n\tX " + e() + " `json:\"x,omitempty\"`\n\ty, Z " + e() + "\n\ta.T\n}"
	case 9:
		if in == "p" {
			return "a.List[" + e() + "]"
		}
		return "func() " + e()
	case 10:
		if in == "p" {
			return "a.Pair[string, " + e() + "]"
		}
		return "[]" + e()
	case 11:
		return "interface{ M(" + e() + ") " + e() + " }"
	default:
		return "func(" + e() + ")"
	}
}

// results are result types, mostly ones the codec round-trips.
func (g *progGen) result(in string) string {
	rs := []string{"string", "int", "*Order", "[]Order", "map[string]int", "struct{ X int }", "S", "[]byte", "Arr"}
	if in == "p" {
		rs = append(rs, "a.List[string]", "[]a.T", "a.T")
	}
	if g.chance(15) {
		return g.typ(2, in)
	}
	return rs[g.pick(len(rs))]
}

// program returns the files of a random service package.
func (g *progGen) program() map[string]string {
	typeName := "Svc"
	if g.chance(20) {
		typeName = "Überweisung"
	}
	iface := g.chance(25)
	var files [2]strings.Builder
	files[0].WriteString(`package svc

import (
	"context"
	"errors"
	"time"

	"ex.com/p/a"
)

var (
	_ = time.Second
	_ a.T
	_ context.Context
)

// ErrX is a sentinel.
var ErrX = errors.New("x")

type Order struct {
	ID  string
	Seq int
}

type S string
type B byte
type Arr [4]B
type Sl []B

type Nested struct {
	O    Order
	P    *Order
	Deep struct{ *Order }
}

`)
	files[1].WriteString(`package svc

import (
	"context"
	"time"

	"ex.com/q/a"
)

var (
	_ = time.Second
	_ a.T
	_ context.Context
)

`)
	// Package-level names the generated file may want for itself.
	for _, n := range []string{"idem", "idemrt", "w", "k", "h", "v", "ex", "next", "key", "hash", "a2",
		"idemSvcM0", "idemSvcM1", "stringArg", "nilArg", "contextArg", "errorArg", "p0", "v2", "err2"} {
		if g.chance(15) {
			fmt.Fprintf(&files[0], "var %s = 0\n\n", n)
		}
	}
	if g.chance(15) {
		files[0].WriteString("//idem:defaults ttl=1h\n")
	}
	if iface {
		fmt.Fprintf(&files[0], "type %s interface {\n", typeName)
		if g.chance(30) {
			files[0].WriteString("\ta.Doer\n")
		}
	} else {
		fields := []string{"n int"}
		for _, f := range []string{"ex int", "next string", "idemEx bool", "Order", "*a.Inner", "a.Helper"} {
			if g.chance(20) {
				fields = append(fields, f)
			}
		}
		fmt.Fprintf(&files[0], "type %s struct {\n\t%s\n}\n\n", typeName, strings.Join(fields, "\n\t"))
	}
	declared := map[string]bool{}
	nMethods := 1 + g.pick(3)
	for i := range nMethods + g.pick(3) {
		annotated := i < nMethods
		name := fmt.Sprintf("M%d", i)
		if g.chance(10) {
			name = typeName
		}
		if g.chance(10) && !iface && name[0] == 'M' {
			name = "m" + name[1:]
		}
		fi := 0
		if !iface && g.chance(40) {
			fi = 1
		}
		in := []string{"p", "q"}[fi]
		sig, ann := g.method(in, annotated)
		if declared[name] {
			continue
		}
		declared[name] = true
		w := &files[fi]
		if iface {
			if ann != "" {
				fmt.Fprintf(w, "\t// %s is annotated.\n\t//\n\t%s\n", name, ann)
			}
			fmt.Fprintf(w, "\t%s%s\n", name, sig)
			continue
		}
		recv := "*" + typeName
		if g.chance(20) {
			recv = typeName
		}
		if ann != "" {
			fmt.Fprintf(w, "// %s is annotated.\n//\n%s\n", name, ann)
		}
		fmt.Fprintf(w, "func (s_ %s) %s%s { for {} }\n\n", recv, name, sig)
	}
	if iface {
		files[0].WriteString("}\n")
	}
	// A second annotated type, in the file that imports the other package
	// a, with a method named like itself or not.
	if g.chance(20) {
		files[1].WriteString("type Pay struct{}\n\n")
		for i := range 1 + g.pick(2) {
			name := []string{"Pay", "Charge"}[i]
			sig, ann := g.method("q", true)
			fmt.Fprintf(&files[1], "// %s is annotated.\n//\n%s\nfunc (s_ *Pay) %s%s { for {} }\n\n", name, ann, name, sig)
		}
	}
	return map[string]string{"/svc/s1.go": files[0].String(), "/svc/s2.go": files[1].String()}
}

// method returns a random signature and, when annotated, its //idem: line.
func (g *progGen) method(in string, annotated bool) (sig, ann string) {
	used := map[string]bool{"s_": true}
	name := func() string {
		for {
			n := paramNames[g.pick(len(paramNames))]
			if !used[n] {
				used[n] = true
				return n
			}
		}
	}
	type param struct{ name, typ string }
	params := []param{{name(), "context.Context"}}
	var keyParts, hashable []string
	for range 1 + g.pick(2) {
		var ks []keyable
		for _, k := range keyables {
			if k.in == "" || k.in == in {
				ks = append(ks, k)
			}
		}
		k := ks[g.pick(len(ks))]
		p := param{name(), k.typ}
		params = append(params, p)
		keyParts = append(keyParts, p.name+k.paths[g.pick(len(k.paths))])
		hashable = append(hashable, p.name)
	}
	for range g.pick(4) {
		n := name()
		if g.chance(10) {
			n = "_"
		}
		params = append(params, param{n, g.typ(3, in)})
	}
	g.r.Shuffle(len(params)-1, func(i, j int) { params[i+1], params[j+1] = params[j+1], params[i+1] })
	var ps []string
	for _, p := range params {
		ps = append(ps, p.name+" "+p.typ)
	}
	result := "error"
	if g.chance(75) {
		result = "(" + g.result(in) + ", error)"
	}
	sig = "(" + strings.Join(ps, ", ") + ") " + result
	if !annotated {
		return sig, ""
	}
	key := strings.Join(keyParts, "+")
	if g.chance(30) {
		key += []string{"+op", `+"lit"`, "+tenant"}[g.pick(3)]
	}
	opts := []string{"key=" + key}
	if g.chance(10) {
		opts = append(opts, fmt.Sprintf("op=op%d", g.pick(1000)))
	}
	if g.chance(10) {
		opts = append(opts, "lease=1s")
	}
	if g.chance(97) {
		opts = append(opts, []string{"ttl=155s", "ttl=7d", "ttl=90m", "retries=3 timeout=2s backoff=1s"}[g.pick(4)])
	}
	switch g.pick(4) {
	case 0:
		opts = append(opts, "hash=none")
	case 1, 2:
		opts = append(opts, "hash="+strings.Join(hashable, ","))
	}
	if g.chance(20) && in == "p" {
		opts = append(opts, "final=ErrX")
	}
	if g.chance(20) {
		opts = append(opts, "inflight=wait:2s")
	}
	return sig, "//idem:" + strings.Join(opts, " ")
}

// genOutcome is what one case did.
type genOutcome int

const (
	genGenerated genOutcome = iota
	genRefused
)

// runGenerative builds the program of seed, generates, and checks the
// contract; it returns what happened.
func runGenerative(t testing.TB, env *genEnv, seed uint64) genOutcome {
	t.Helper()
	g := &progGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	return checkProgram(t, env, fmt.Sprintf("seed %d", seed), g.program())
}

// checkProgram type-checks the package of srcs (file name → source, all
// in /svc/, package ex.com/svc), generates, and checks the contract: the
// generated file type-checks with the package and the wrapper has every
// method of the wrapped type, or every error has a file:line:col.
func checkProgram(t testing.TB, env *genEnv, what string, srcs map[string]string) genOutcome {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	all := ""
	for _, name := range slices.Sorted(maps.Keys(srcs)) {
		all += "--- " + name + "\n" + srcs[name] + "\n"
	}
	for _, name := range slices.Sorted(maps.Keys(srcs)) {
		f, err := parser.ParseFile(fset, name, srcs[name], parser.ParseComments)
		if err != nil {
			t.Fatalf("%s: the test wrote a program that does not parse: %v\n%s", what, err, srcs[name])
		}
		files = append(files, f)
	}
	info := &types.Info{
		Types: map[ast.Expr]types.TypeAndValue{}, Defs: map[*ast.Ident]types.Object{},
		Uses: map[*ast.Ident]types.Object{}, Implicits: map[ast.Node]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
	}
	pkg, err := (&types.Config{Importer: env}).Check("ex.com/svc", fset, files, info)
	if err != nil {
		t.Fatalf("%s: the test wrote a program that does not type-check: %v\n%s", what, err, all)
	}
	model, err := annotations.ResolvePackage(fset, files, pkg, info)
	var content []byte
	if err == nil {
		var outs []templates.Output
		if outs, err = templates.RenderFiles(model); err == nil {
			if len(outs) != 1 {
				t.Fatalf("%s: %d generated files for a program without build constraints", what, len(outs))
			}
			content = outs[0].Content
		}
	}
	if err != nil {
		var list annotations.ErrorList
		if !errors.As(err, &list) {
			t.Fatalf("%s: error without a position: %v\n%s", what, err, all)
		}
		for _, e := range list {
			if e.Pos.Filename == "" || e.Pos.Line <= 0 || e.Pos.Column <= 0 {
				t.Fatalf("%s: error without a file:line:col: %v\n%s", what, e, all)
			}
		}
		return genRefused
	}
	gen, err := parser.ParseFile(fset, "/svc/"+templates.FileName, content, parser.ParseComments)
	if err != nil {
		t.Fatalf("%s: generated code does not parse: %v\n%s", what, err, content)
	}
	// The templates write gofmt's layout without a gofmt pass.
	if formatted, err := format.Source(content); err != nil || !bytes.Equal(formatted, content) {
		t.Fatalf("%s: gofmt changes the generated code (%v):\n%s", what, err, lineDiff(content, formatted))
	}
	var typeErrs []string
	conf := &types.Config{Importer: env, Error: func(err error) { typeErrs = append(typeErrs, err.Error()) }}
	out, _ := conf.Check("ex.com/svc", fset, append(files, gen), nil)
	// The wrapper is a drop-in replacement: it has every method of the
	// wrapped type, with the same signature.
	for _, t := range model.Types {
		if len(typeErrs) > 0 {
			break
		}
		wrapperName, _ := templates.WrapperNames(t.Name)
		wrapper := types.NewPointer(out.Scope().Lookup(wrapperName).Type())
		wrapped := out.Scope().Lookup(t.Name).Type()
		if !t.Interface {
			wrapped = types.NewPointer(wrapped)
		}
		ms := types.NewMethodSet(wrapped)
		for i := range ms.Len() {
			fn := ms.At(i).Obj()
			if !fn.Exported() && fn.Pkg() != out {
				continue // not passed through; see docs/ANNOTATIONS.md
			}
			got, _, _ := types.LookupFieldOrMethod(wrapper, false, out, fn.Name())
			if gf, ok := got.(*types.Func); !ok || !types.Identical(gf.Type(), fn.Type()) {
				typeErrs = append(typeErrs, fmt.Sprintf("%s lacks method %s%s (has %v)", wrapperName, fn.Name(), fn.Type(), got))
			}
		}
	}
	if len(typeErrs) > 0 {
		t.Fatalf("%s: generated code does not type-check:\n%s\n%s--- %s\n%s",
			what, strings.Join(typeErrs, "\n"), all, templates.FileName, content)
	}
	return genGenerated
}

// TestGenerative runs generativeSeeds random programs through the
// generator (FuzzGenerate runs more).
func TestGenerative(t *testing.T) {
	env, err := loadGenEnv()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[genOutcome]int{}
	for seed := range uint64(generativeSeeds) {
		counts[runGenerative(t, env, seed)]++
	}
	t.Logf("%d seeds: %d generated and type-checked, %d refused at a position", generativeSeeds, counts[genGenerated], counts[genRefused])
	if counts[genGenerated] < generativeSeeds/4 {
		t.Errorf("only %d of %d programs generated: the grammar mostly tests refusals", counts[genGenerated], generativeSeeds)
	}
}

// FuzzGenerate maps a seed to a random program and checks the generator's
// contract on it (make fuzz).
func FuzzGenerate(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed)
	}
	env, err := loadGenEnv()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		runGenerative(t, env, seed)
	})
}

// TestParamNamesShadowNothing gives a parameter, in turn, every name of the
// universe scope and every name the wrapper refers to or declares (imports,
// package-level types of the signature, the wrapper, constructor and
// descriptor, the receiver and locals), as the context, as a key path root
// and as a plain parameter, and a pass-through method the same names: every
// program must generate and type-check.
func TestParamNamesShadowNothing(t *testing.T) {
	env, err := loadGenEnv()
	if err != nil {
		t.Fatal(err)
	}
	names := append(types.Universe.Names(), "idem", "idemrt", "context", "time", "a", "Order", "Svc", "Pay",
		"IdempotentSvc", "NewIdempotentSvc", "IdempotentPay", "NewIdempotentPay", "idemSvcM", "idemSvcN", "idemPayPay",
		"w", "wr", "wrapper", "k", "key", "h", "hash", "err", "v", "v2", "next", "ex", "idemEx", "p0", "p1", "s_")
	for _, name := range names {
		if name == "s_" || name == "Svc" || name == "Pay" {
			continue // the receiver and the types declared below; a parameter cannot share their names here
		}
		src := strings.NewReplacer("NAME", name).Replace(`package svc

import (
	"context"

	"ex.com/p/a"
)

type Order struct{ ID string }

type Svc struct{}

//idem:key=NAME.ID+x.ID ttl=1m hash=NAME,x
func (s_ *Svc) M(ctx context.Context, NAME *Order, x a.T, c chan (<-chan Order)) (Order, error) { for {} }

//idem:key=id ttl=1m
func (s_ *Svc) N(NAME context.Context, id string) error { for {} }

type Pay struct{}

//idem:key=id ttl=1m
func (s_ *Pay) Pay(ctx context.Context, id [4]byte) (map[string]a.T, error) { for {} }

func (s_ *Pay) Other(NAME int, x ...a.T) (a.T, error) { for {} }
`)
		if got := checkProgram(t, env, "parameter "+name, map[string]string{"/svc/s.go": src}); got != genGenerated {
			t.Errorf("parameter %s: refused", name)
		}
	}
}

// lineDiff returns the first line where got and want differ, with its
// neighbours, for a failure message.
func lineDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			lo := max(0, i-3)
			return fmt.Sprintf("line %d:\n--- generated\n%s\n--- gofmt\n%s", i+1,
				strings.Join(g[lo:min(len(g), i+3)], "\n"), strings.Join(w[lo:min(len(w), i+3)], "\n"))
		}
	}
	return fmt.Sprintf("%d lines generated, %d after gofmt", len(g), len(w))
}
