package templates

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/annotations"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fakeImporter type-checks the few packages the test sources import from
// strings, so the tests need neither GOROOT sources nor export data.
type fakeImporter map[string]string

func (fi fakeImporter) Import(path string) (*types.Package, error) {
	src, ok := fi[path]
	if !ok {
		return importer.Default().Import(path)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path+".go", src, 0)
	if err != nil {
		return nil, err
	}
	return (&types.Config{Importer: fi}).Check(path, fset, []*ast.File{f}, nil)
}

var fakes = fakeImporter{
	"context":                  "package context\ntype Context interface{ Done() <-chan struct{} }",
	"example.com/pay":          "package pay\ntype errorString struct{}\nfunc (errorString) Error() string { return \"\" }\nvar ErrClosed error = errorString{}\ntype Amount int64",
	"example.com/other/idem":   "package idem\ntype Token string",
	"github.com/jackc/pgx/v5":  "package pgx\ntype Conn struct{}",
	"example.com/ctxless/time": "package time\ntype Stamp int64",
}

// check type-checks src as package path and returns it.
func check(t testing.TB, path, src string) *types.Package {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "src.go", src, 0)
	require.NoError(t, err)
	pkg, err := (&types.Config{Importer: fakes}).Check(path, fset, []*ast.File{f}, nil)
	require.NoError(t, err)
	return pkg
}

// builder makes hand-built models from a type-checked package.
type builder struct {
	t   testing.TB
	pkg *types.Package
}

func (b builder) typ(name string, methods ...*annotations.Method) *annotations.Type {
	obj := b.pkg.Scope().Lookup(name).(*types.TypeName)
	return &annotations.Type{Name: name, Obj: obj, Interface: types.IsInterface(obj.Type()), Methods: methods}
}

// method builds a Method of type tname with key parts given as paths
// ("order.ID", `"lit"`, "op", "tenant") and every parameter hashed.
func (b builder) method(tname, name string, ttl time.Duration, key ...string) *annotations.Method {
	b.t.Helper()
	obj := b.pkg.Scope().Lookup(tname).(*types.TypeName)
	recv := obj.Type()
	if !types.IsInterface(recv) {
		recv = types.NewPointer(recv)
	}
	fn, _, _ := types.LookupFieldOrMethod(recv, true, b.pkg, name)
	require.NotNil(b.t, fn, "%s.%s", tname, name)
	f := fn.(*types.Func)
	sig := f.Type().(*types.Signature)
	m := &annotations.Method{Name: name, Op: tname + "." + name, Func: f, Sig: sig, TTL: ttl}
	for i := range sig.Params().Len() {
		v := sig.Params().At(i)
		pname := v.Name()
		if pname == "" || pname == "_" {
			pname = fmt.Sprintf("p%d", i)
		}
		m.Params = append(m.Params, annotations.Param{Name: pname, Type: v.Type()})
		if i > 0 {
			m.Hash = append(m.Hash, i)
		}
	}
	if sig.Results().Len() == 2 {
		m.Result = sig.Results().At(0).Type()
	}
	for _, k := range key {
		m.Key = append(m.Key, b.part(m, k))
	}
	return m
}

func (b builder) part(m *annotations.Method, expr string) annotations.KeyPart {
	b.t.Helper()
	switch {
	case strings.HasPrefix(expr, `"`):
		return annotations.KeyPart{Kind: annotations.PartLiteral, Expr: expr, Literal: strings.Trim(expr, `"`)}
	case expr == "op":
		return annotations.KeyPart{Kind: annotations.PartOp, Expr: expr}
	case expr == "tenant":
		return annotations.KeyPart{Kind: annotations.PartTenant, Expr: expr}
	}
	names := strings.Split(expr, ".")
	p := annotations.KeyPart{Kind: annotations.PartPath, Expr: expr, Param: -1}
	for i, prm := range m.Params {
		if prm.Name == names[0] {
			p.Param = i
		}
	}
	require.GreaterOrEqual(b.t, p.Param, 0, expr)
	t := m.Params[p.Param].Type
	for _, n := range names[1:] {
		method := strings.HasSuffix(n, "()")
		n = strings.TrimSuffix(n, "()")
		_, isPtr := t.Underlying().(*types.Pointer)
		obj, _, _ := types.LookupFieldOrMethod(t, true, b.pkg, n)
		require.NotNil(b.t, obj, "%s in %s", n, expr)
		p.Steps = append(p.Steps, annotations.Step{Name: n, Method: method, NilCheck: isPtr || types.IsInterface(t)})
		if method {
			t = obj.Type().(*types.Signature).Results().At(0).Type()
		} else {
			t = obj.Type()
		}
	}
	p.Type = t
	p.Encoding = encodingOf(t)
	_, isPtr := t.Underlying().(*types.Pointer)
	p.NilCheck = isPtr || types.IsInterface(t)
	return p
}

func encodingOf(t types.Type) annotations.Encoding {
	if b, ok := t.Underlying().(*types.Basic); ok {
		switch {
		case b.Info()&types.IsString != 0:
			return annotations.EncString
		case b.Info()&types.IsUnsigned != 0:
			return annotations.EncUint
		case b.Info()&types.IsInteger != 0:
			return annotations.EncInt
		case b.Info()&types.IsBoolean != 0:
			return annotations.EncBool
		}
	}
	if _, ok := t.Underlying().(*types.Array); ok {
		return annotations.EncBytes
	}
	if types.NewMethodSet(t).Lookup(nil, "String") != nil || types.NewMethodSet(types.NewPointer(t)).Lookup(nil, "String") != nil {
		return annotations.EncStringer
	}
	return annotations.EncTextMarshal
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./templates -update to create it")
	assert.Equal(t, string(want), string(got))
}

const ordersSrc = `package orders

import (
	"context"
	"example.com/pay"
	pgx "github.com/jackc/pgx/v5"
)

type Order struct {
	ID       string
	Customer *Customer
	Seq      int32
}

type Customer struct{ ID string; UUID [16]byte }

type Receipt struct{ Amount pay.Amount }

type OrderID string

func (id OrderID) String() string { return string(id) }

type Msg interface{ Key() string; Meta() *Customer }

var ErrInsufficientFunds error

type OrderService struct{ db *pgx.Conn }

func (s *OrderService) Pay(ctx context.Context, order *Order, op string) (*Receipt, error) { return nil, nil }
func (s *OrderService) Cancel(ctx context.Context, id OrderID) error { return nil }
func (s OrderService) Consume(ctx context.Context, msg Msg, raw []byte, n uint16) (int, error) { return 0, nil }

type Store interface {
	Get(ctx context.Context, k string, h int) (map[string][]*pay.Amount, error)
}
`

func ordersModel(t *testing.T) *annotations.Package {
	pkg := check(t, "example.com/orders", ordersSrc)
	b := builder{t, pkg}
	pay := b.method("OrderService", "Pay", 155*time.Second, "order.ID", "op")
	pay.Budget = &annotations.Budget{Retries: 2, Timeout: 2 * time.Second, Backoff: 500 * time.Millisecond, Downstream: 120 * time.Second, Margin: 30 * time.Second}
	pay.Final = []annotations.FinalRef{
		{Name: "ErrInsufficientFunds", Var: pkg.Scope().Lookup("ErrInsufficientFunds").(*types.Var)},
		{Name: "pay.ErrClosed", Var: pkg.Imports()[1].Scope().Lookup("ErrClosed").(*types.Var)},
	}
	pay.Inflight, pay.Wait, pay.Lease = annotations.InflightWait, 3*time.Second, 10*time.Second
	cancel := b.method("OrderService", "Cancel", 7*24*time.Hour, `"cancel"`, "id", "tenant")
	consume := b.method("OrderService", "Consume", 90*time.Minute, "msg.Key()", "msg.Meta().UUID")
	consume.Hash = []int{2}
	get := b.method("Store", "Get", time.Minute, "k", "h")
	get.HashNone, get.Hash = true, nil
	return &annotations.Package{Name: "orders", Path: "example.com/orders", Types: []*annotations.Type{
		b.typ("OrderService", pay, cancel, consume),
		b.typ("Store", get),
	}}
}

func TestRenderOrders(t *testing.T) {
	got, err := Render(ordersModel(t))
	require.NoError(t, err)
	golden(t, "orders.golden", got)

	again, err := Render(ordersModel(t))
	require.NoError(t, err)
	assert.Equal(t, string(got), string(again), "same model, same bytes")
}

func TestDurationCode(t *testing.T) {
	g, err := newGen(ordersModel(t))
	require.NoError(t, err)
	for d, want := range map[time.Duration]string{
		155 * time.Second:       "155 * time.Second",
		time.Minute:             "time.Minute",
		7 * 24 * time.Hour:      "168 * time.Hour",
		2500 * time.Millisecond: "2500 * time.Millisecond",
		90 * time.Minute:        "90 * time.Minute",
		3 * time.Nanosecond:     "time.Duration(3)",
	} {
		assert.Equal(t, want, g.durationCode(d), d)
	}
}

func TestHashAdd(t *testing.T) {
	pkg := check(t, "example.com/h", "package h\ntype Name string\ntype Big struct{}\ntype Raw []byte")
	for _, c := range []struct {
		t    types.Type
		want string
	}{
		{types.Typ[types.String], "h.String(x)"},
		{pkg.Scope().Lookup("Name").Type(), "h.String(string(x))"},
		{types.Typ[types.Int32], "h.Int(int64(x))"},
		{types.Typ[types.Int64], "h.Int(x)"},
		{types.Typ[types.Uint8], "h.Uint(uint64(x))"},
		{types.Typ[types.Float32], "h.Float(float64(x))"},
		{types.Typ[types.Bool], "h.Bool(x)"},
		{types.NewSlice(types.Typ[types.Byte]), "h.Bytes(x)"},
		{pkg.Scope().Lookup("Raw").Type(), "h.Bytes([]byte(x))"},
		{pkg.Scope().Lookup("Big").Type(), "h.Value(x)"},
	} {
		assert.Equal(t, c.want, hashAdd("h", "x", c.t), c.t.String())
	}
}

func TestImportNames(t *testing.T) {
	// The package imports packages of its own named idem and time, and has
	// a parameter named context: the user's packages keep the names the
	// package uses for them, the runtime and the standard time package
	// step aside, and the parameter is renamed (it would shadow the import
	// of context in the wrapper's body).
	pkg := check(t, "example.com/desk", `package desk

import (
	ctx "context"
	"example.com/other/idem"
	"example.com/ctxless/time"
)

var clock = 1

type Desk struct{}

func (d *Desk) Open(c ctx.Context, t idem.Token, context time.Stamp) (string, error) { return "", nil }
`)
	b := builder{t, pkg}
	m := b.method("Desk", "Open", time.Hour, "t")
	g, err := newGen(&annotations.Package{Name: "desk", Path: "example.com/desk", Types: []*annotations.Type{b.typ("Desk", m)}})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"context":                  "context",
		"time":                     "time2",
		"example.com/ctxless/time": "time",
		"example.com/other/idem":   "idem",
		RuntimePath:                "idemrt",
	}, g.imports)
	assert.Equal(t, []string{"c", "t", "contextArg"}, g.types[0].methods[0].pnames)
}

func TestAssumedName(t *testing.T) {
	for path, want := range map[string]string{
		"context":                        "context",
		"github.com/jackc/pgx/v5":        "pgx",
		"github.com/redis/go-redis/v9":   "redis",
		"gopkg.in/yaml.v3":               "yaml",
		"example.com/ForeignTypes/v2":    "ForeignTypes",
		"github.com/idemgen/idemgen/v2x": "v2x",
	} {
		assert.Equal(t, want, assumedName(path), path)
	}
}

func TestWrapperNameClash(t *testing.T) {
	pkg := check(t, "example.com/s", `package s

import "context"

type S struct{}

type IdempotentS int

func NewIdempotentS() {}

func (s *S) Do(ctx context.Context, id string) error { return nil }
`)
	b := builder{t, pkg}
	s := b.typ("S", b.method("S", "Do", time.Hour, "id"))
	s.Pos = token.Position{Filename: "s.go", Line: 5, Column: 6}
	_, err := Render(&annotations.Package{Name: "s", Path: "example.com/s", Types: []*annotations.Type{s}})
	assert.EqualError(t, err, "s.go:5:6: IdempotentS is already declared in package s; idemgen declares it for the annotated type S: rename one of them\n"+
		"s.go:5:6: NewIdempotentS is already declared in package s; idemgen declares it for the annotated type S: rename one of them")
}

func TestWrapperNames(t *testing.T) {
	w, c := WrapperNames("OrderService")
	assert.Equal(t, []string{"IdempotentOrderService", "NewIdempotentOrderService"}, []string{w, c})
	w, c = WrapperNames("orderService")
	assert.Equal(t, []string{"idempotentOrderService", "newIdempotentOrderService"}, []string{w, c})
}

func TestEmitters(t *testing.T) {
	model := ordersModel(t)
	g, err := newGen(model)
	require.NoError(t, err)
	store := g.types[1]
	var s source
	store.interfaceAssertion(&s)
	assert.Equal(t, "var _ Store = (*IdempotentStore)(nil)\n", string(s.b))
	s = source{}
	g.handshake(&s)
	assert.Equal(t, "// Compile-time check that this file was generated for a compatible runtime.\nconst _ = idem.GeneratedCodeVersion1\n",
		string(s.b))

	// A path through a method whose result is checked binds it once.
	svc := g.types[0]
	consume := svc.methods[2]
	consume.names = newNamer(map[string]bool{"ctx": true, "msg": true, "raw": true, "n": true})
	consume.k = "k"
	pc, err := consume.pathPart(consume.m.Key[1])
	require.NoError(t, err)
	s = source{}
	pc.write(&s, "k")
	assert.Equal(t, `if msg == nil {
	k.Missing("msg.Meta().UUID")
} else if v := msg.Meta(); v == nil {
	k.Missing("msg.Meta().UUID")
} else {
	k.Bytes("msg.Meta().UUID", v.UUID[:])
}
`, string(s.b))
}

// TestRenderInternalError: generated code that does not format (here from a
// model no resolver would build, a method name with a space) is an internal
// error at the method, asking for a report, never a dump of generated code.
func TestRenderInternalError(t *testing.T) {
	pkg := check(t, "example.com/desk", `package desk

import "context"

type Desk struct{}

func (d *Desk) Open(ctx context.Context, id string) (string, error) { return "", nil }
`)
	b := builder{t, pkg}
	m := b.method("Desk", "Open", time.Hour, "id")
	m.Name = "Open Now"
	m.Pos = token.Position{Filename: "desk.go", Line: 7, Column: 16}
	_, err := Render(&annotations.Package{Name: "desk", Path: "example.com/desk", Types: []*annotations.Type{b.typ("Desk", m)}})
	var list annotations.ErrorList
	require.ErrorAs(t, err, &list)
	require.Len(t, list, 1)
	assert.Equal(t, m.Pos, list[0].Pos)
	assert.Contains(t, list[0].Msg, "internal error")
	assert.Contains(t, list[0].Msg, "please report it")
	assert.NotContains(t, list[0].Msg, "func (", "no generated source in the message")
	assert.NotContains(t, list[0].Msg, "\n")
}

// TestBytesCode: every byte-like form converts to []byte; an array or
// slice of a named byte type goes through string, since []B does not
// convert to []byte.
func TestBytesCode(t *testing.T) {
	pkg := check(t, "example.com/b", "package b\ntype B byte\ntype A = byte\ntype ID [4]B\ntype UUID [16]byte\ntype Raw []byte\ntype Bs []B")
	lookup := func(name string) types.Type { return pkg.Scope().Lookup(name).Type() }
	for _, c := range []struct {
		t    types.Type
		want string
	}{
		{types.NewArray(types.Typ[types.Byte], 4), "x[:]"},
		{types.NewArray(lookup("A"), 4), "x[:]"},
		{lookup("UUID"), "x[:]"},
		{lookup("ID"), "[]byte(string(x[:]))"},
		{types.NewArray(lookup("B"), 2), "[]byte(string(x[:]))"},
		{types.NewSlice(types.Typ[types.Byte]), "x"},
		{lookup("Raw"), "[]byte(x)"},
		{lookup("Bs"), "[]byte(string(x))"},
		{types.NewSlice(lookup("B")), "[]byte(string(x))"},
	} {
		assert.Equal(t, c.want, bytesCode("x", c.t), c.t.String())
	}
}

// TestTypeCode: types are spelled by go/types, with the file's import
// names (here idem for the user's package example.com/other/idem, and the
// runtime as idemrt), and types the file cannot name are errors.
func TestTypeCode(t *testing.T) {
	pkg := check(t, "example.com/desk", `package desk

import (
	"context"
	"example.com/other/idem"
	"example.com/pay"
)

type Box[T any] struct{ V T }

type Desk struct{}

func (d *Desk) Open(ctx context.Context, t idem.Token, a pay.Amount) (string, error) { return "", nil }

type (
	C1 chan (<-chan int)
	C2 chan<- <-chan int
	F  func(int, ...pay.Amount) (Box[idem.Token], error)
	S  struct {
		Box[int]
		Tag string `+"`json:\"tag\"`"+`
	}
	I interface{ M(chan<- idem.Token) }
)
`)
	b := builder{t, pkg}
	g, err := newGen(&annotations.Package{Name: "desk", Path: "example.com/desk",
		Types: []*annotations.Type{b.typ("Desk", b.method("Desk", "Open", time.Hour, "t"))}})
	require.NoError(t, err)
	spell := func(typ types.Type) string {
		var s source
		c, err := g.typeCode(&s, typ)
		if err != nil {
			return "error: " + err.Error()
		}
		if !s.format {
			return c
		}
		out, err := formatDecl([]byte("type T " + c + "\n"))
		require.NoError(t, err)
		return strings.TrimSpace(strings.TrimPrefix(string(out), "type T "))
	}
	under := func(name string) types.Type { return pkg.Scope().Lookup(name).Type().Underlying() }
	assert.Equal(t, "chan (<-chan int)", spell(under("C1")))
	assert.Equal(t, "chan<- <-chan int", spell(under("C2")))
	assert.Equal(t, "func(int, ...pay.Amount) (Box[idem.Token], error)", spell(under("F")))
	assert.Equal(t, "struct {\n\tBox[int]\n\tTag string `json:\"tag\"`\n}", spell(under("S")))
	assert.Equal(t, "struct {\n\tX int \"a`b\"\n}", spell(types.NewStruct([]*types.Var{types.NewField(0, pkg, "X", types.Typ[types.Int], false)}, []string{"a`b"})))
	assert.Equal(t, "interface{ M(chan<- idem.Token) }", spell(under("I")))
	assert.Contains(t, spell(types.NewStruct([]*types.Var{types.NewField(0, pkg.Imports()[1], "secret", types.Typ[types.Int], false)}, nil)), "error: struct field secret of package")
}
