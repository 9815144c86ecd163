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

	"github.com/dave/jennifer/jen"
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

// resolve type-checks src as package path and resolves its annotations:
// the templates print the resolver's model, so the tests build it the same
// way.
func resolve(t testing.TB, path, src string) *annotations.Package {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "src.go", src, parser.ParseComments)
	require.NoError(t, err)
	info := &types.Info{
		Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{},
		Types: map[ast.Expr]types.TypeAndValue{}, Implicits: map[ast.Node]types.Object{},
	}
	pkg, err := (&types.Config{Importer: fakes}).Check(path, fset, []*ast.File{f}, info)
	require.NoError(t, err)
	model, err := annotations.ResolvePackage(fset, []*ast.File{f}, pkg, info)
	require.NoError(t, err)
	return model
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

var ErrInsufficientFunds error = pay.ErrClosed

type OrderService struct{ db *pgx.Conn }

//idem:key=order.ID+op retries=2 timeout=2s backoff=500ms downstream=120s margin=30s
//idem:lease=10s inflight=wait:3s final=ErrInsufficientFunds|pay.ErrClosed
func (s *OrderService) Pay(ctx context.Context, order *Order, note string) (*Receipt, error) { return nil, nil }

//idem:key="cancel"+id+tenant ttl=7d
func (s *OrderService) Cancel(ctx context.Context, id OrderID) error { return nil }

//idem:key=msg.Key()+msg.Meta().UUID ttl=90m hash=raw
func (s OrderService) Consume(ctx context.Context, msg Msg, raw []byte, n uint16) (int, error) { return 0, nil }

type Store interface {
	//idem:key=k+h ttl=1m hash=none
	Get(ctx context.Context, k string, h int) (map[string][]*pay.Amount, error)
}
`

func ordersModel(t *testing.T) *annotations.Package {
	return resolve(t, "example.com/orders", ordersSrc)
}

func TestRenderOrders(t *testing.T) {
	got, err := renderFile(ordersModel(t))
	require.NoError(t, err)
	golden(t, "orders.golden", got)

	again, err := renderFile(ordersModel(t))
	require.NoError(t, err)
	assert.Equal(t, string(got), string(again), "same model, same bytes")
}

func TestDurationCode(t *testing.T) {
	for d, want := range map[time.Duration]string{
		155 * time.Second:       "155 * time.Second",
		time.Minute:             "time.Minute",
		7 * 24 * time.Hour:      "168 * time.Hour",
		2500 * time.Millisecond: "2500 * time.Millisecond",
		90 * time.Minute:        "90 * time.Minute",
		3 * time.Nanosecond:     "time.Duration(3)",
	} {
		assert.Equal(t, want, fmt.Sprintf("%#v", durationCode(d)), d)
	}
}

func TestImportNames(t *testing.T) {
	// The package imports packages of its own named idem and time, and has
	// a parameter named context: the user's packages keep the names the
	// package uses for them, the runtime and the standard time package
	// step aside, and the parameter is renamed (it would shadow the import
	// of context in the wrapper's body).
	model := resolve(t, "example.com/desk", `package desk

import (
	ctx "context"
	"example.com/other/idem"
	"example.com/ctxless/time"
)

var clock = 1

type Desk struct{}

//idem:key=t ttl=1h
func (d *Desk) Open(c ctx.Context, t idem.Token, context time.Stamp) (string, error) { return "", nil }
`)
	g, err := newGen(model)
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
	model := resolve(t, "example.com/s", `package s

import "context"

type S struct{}

type IdempotentS int

func NewIdempotentS() {}

//idem:key=id ttl=1h
func (s *S) Do(ctx context.Context, id string) error { return nil }
`)
	model.Types[0].Pos = token.Position{Filename: "s.go", Line: 5, Column: 6}
	_, err := renderFile(model)
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
	assert.Equal(t, "var _ Store = (*IdempotentStore)(nil)", snippet(t, g, store.interfaceAssertion()))
	assert.Equal(t, "// Compile-time check that this file was generated for a compatible runtime.\nconst _ = idem.GeneratedCodeVersion1",
		snippet(t, g, g.handshake()))

	// A path through a method whose result is checked binds it once.
	svc := g.types[0]
	consume := svc.methods[2]
	consume.names = newNamer(map[string]bool{"ctx": true, "msg": true, "raw": true, "n": true})
	consume.k = "k"
	pc, err := consume.pathPart(consume.m.Key[1])
	require.NoError(t, err)
	assert.Equal(t, `if msg == nil {
	k.Missing("msg.Meta().UUID")
} else if v := msg.Meta(); v == nil {
	k.Missing("msg.Meta().UUID")
} else {
	k.Bytes("msg.Meta().UUID", v.UUID[:])
}`, snippet(t, g, jen.Func().Id("_").Params().Block(pc.code("k"))))
}

// snippet is code as the file of g renders and formats it, without the
// header and imports; the body of a func _() is returned alone, unindented.
func snippet(t *testing.T, g *gen, code jen.Code) string {
	t.Helper()
	f := g.newFile()
	f.NoFormat = false
	f.Add(code)
	var b strings.Builder
	require.NoError(t, f.Render(&b))
	chunks := strings.Split(strings.TrimSpace(b.String()), "\n\n")
	out := chunks[len(chunks)-1]
	if body, ok := strings.CutPrefix(out, "func _() {\n"); ok {
		body = strings.TrimSuffix(body, "\n}")
		out = strings.ReplaceAll("\n"+body, "\n\t", "\n")[1:]
	}
	return out
}

// TestRenderInternalError: generated code that does not format (here from a
// model no resolver would build, a method name with a space) is an internal
// error at the method, asking for a report, never a dump of generated code.
func TestRenderInternalError(t *testing.T) {
	model := resolve(t, "example.com/desk", `package desk

import "context"

type Desk struct{}

//idem:key=id ttl=1h
func (d *Desk) Open(ctx context.Context, id string) (string, error) { return "", nil }
`)
	m := model.Types[0].Methods[0]
	m.Name = "Open Now"
	m.Pos = token.Position{Filename: "desk.go", Line: 7, Column: 16}
	_, err := renderFile(model)
	var list annotations.ErrorList
	require.ErrorAs(t, err, &list)
	require.Len(t, list, 1)
	assert.Equal(t, m.Pos, list[0].Pos)
	assert.Contains(t, list[0].Msg, "internal error")
	assert.Contains(t, list[0].Msg, "please report it")
	assert.NotContains(t, list[0].Msg, "func (", "no generated source in the message")
	assert.NotContains(t, list[0].Msg, "\n")
}

// TestTypeCode: types are spelled by go/types, with the file's import
// names (here idem for the user's package example.com/other/idem, and the
// runtime as idemrt), and types the file cannot name are errors.
func TestTypeCode(t *testing.T) {
	model := resolve(t, "example.com/desk", `package desk

import (
	"context"
	"example.com/other/idem"
	"example.com/pay"
)

type Box[T any] struct{ V T }

type Desk struct{}

//idem:key=t ttl=1h
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
	g, err := newGen(model)
	pkg := model.Types[0].Obj.Pkg()
	require.NoError(t, err)
	spell := func(typ types.Type) string {
		c, err := g.typeCode(typ)
		if err != nil {
			return "error: " + err.Error()
		}
		return strings.TrimPrefix(snippet(t, g, jen.Type().Id("T").Add(c)), "type T ")
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
