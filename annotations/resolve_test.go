package annotations

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
)

func TestResolveHappy(t *testing.T) {
	_, p, err := load(t, src(`
type Order struct{ ID string; Amount int64 }
type Receipt struct{ ID string }
type RefundRequest struct{ CustomerID string; RefundNo int }
type Refund struct{ N int }

var ErrInsufficientFunds = errorString("x")
var ErrOrderClosed error = errorString("y")
type errorString string
func (e errorString) Error() string { return string(e) }

type OrderService struct{}

//idem:key=order.ID+op ttl=155s
func (s *OrderService) Pay(ctx context.Context, order *Order, op string) (*Receipt, error) { return nil, nil }

//idem:key=req.CustomerID+"refund"+req.RefundNo
//idem:retries=2 timeout=2s backoff=500ms downstream=120s margin=30s   // ttl derived: 155s
//idem:final=ErrInsufficientFunds|ErrOrderClosed inflight=wait:3s
func (s *OrderService) Refund(ctx context.Context, req RefundRequest) (*Refund, error) { return nil, nil }
`))
	require.NoError(t, err)
	require.NotNil(t, p)
	assert.Equal(t, "svc", p.Name)
	assert.Equal(t, "example.com/svc", p.Path)
	require.Len(t, p.Types, 1)
	typ := p.Types[0]
	assert.Equal(t, "OrderService", typ.Name)
	assert.False(t, typ.Interface)
	require.Len(t, typ.Methods, 2)

	pay := typ.Methods[0]
	assert.Equal(t, "Pay", pay.Name)
	assert.Equal(t, "example.com/svc.OrderService.Pay", pay.Op, "qualified by the import path: no other package's OrderService.Pay shares its records")
	assert.Equal(t, "example.com/svc.(*OrderService).Pay", pay.FuncName)
	assert.Equal(t, 155*time.Second, pay.TTL)
	require.Len(t, pay.Key, 2)
	assert.Equal(t, PartPath, pay.Key[0].Kind)
	assert.Equal(t, 1, pay.Key[0].Param)
	assert.Equal(t, []Step{{Name: "ID", NilCheck: true}}, untyped(t, pay.Key[0].Steps))
	assert.Equal(t, EncString, pay.Key[0].Encoding)
	// op is a parameter of Pay: the parameter wins.
	assert.Equal(t, PartPath, pay.Key[1].Kind)
	assert.Equal(t, 2, pay.Key[1].Param)
	assert.Equal(t, []int{1, 2}, pay.Hash)
	assert.Equal(t, "*Receipt", pay.Result.String()[len("*example.com/svc."):][:0]+"*Receipt")

	ref := typ.Methods[1]
	assert.Equal(t, 155*time.Second, ref.TTL)
	require.NotNil(t, ref.Budget)
	assert.Equal(t, Budget{Retries: 2, Timeout: 2 * time.Second, Backoff: 500 * time.Millisecond, Downstream: 120 * time.Second, Margin: 30 * time.Second}, *ref.Budget)
	require.Len(t, ref.Key, 3)
	assert.Equal(t, PartLiteral, ref.Key[1].Kind)
	assert.Equal(t, "refund", ref.Key[1].Literal)
	assert.Equal(t, EncInt, ref.Key[2].Encoding)
	assert.Equal(t, []Step{{Name: "RefundNo"}}, untyped(t, ref.Key[2].Steps))
	assert.Equal(t, InflightWait, ref.Inflight)
	assert.Equal(t, 3*time.Second, ref.Wait)
	require.Len(t, ref.Final, 2)
	assert.Equal(t, "ErrInsufficientFunds", ref.Final[0].Name)
	assert.Equal(t, "ErrOrderClosed", ref.Final[1].Var.Name())
}

func TestResolveNoAnnotations(t *testing.T) {
	_, p, err := load(t, src("type S struct{}\n\nfunc (s *S) M(ctx context.Context) error { return nil }\n"))
	assert.NoError(t, err)
	assert.Nil(t, p)
}

func TestResolveModel(t *testing.T) {
	_, p, err := load(t, map[string]string{
		"a.go": `package svc

import (
	"context"
	"example.com/pay"
	u "example.com/uuid"
	"time"
)

type ID string
func (ID) String() string { return "" }

type Named struct{ n int; Pub int }
func (Named) String() string { return "" }

type Text struct{ n int }
func (Text) MarshalText() ([]byte, error) { return nil, nil }

type Base struct{ Tenant string }
type Msg struct {
	*Base
	UUID u.UUID
	Raw  [16]byte
	Kind ID
	N    Named
	T    Text
	Seq  uint32
	Ok   bool
	Inner *Inner
	Any  interface{ Key() string }
	PS   PtrStr
}
type Inner struct{ Code int8 }
func (m *Msg) Key() string { return "" }
func (m Msg) Ptr() *Inner { return nil }

type Out struct {
	At time.Time
	Tags map[string][]int
	Next *Out
	Self *Out
	base
}
type base struct{ X int }

// Svc is a service.
//idem:defaults ttl=24h lease=10s final=pay.ErrClosed
type Svc struct{}

//idem:key=m.Kind+m.UUID+m.Raw+m.N+m.T+m.Seq+m.Ok+m.Tenant+m.Inner.Code+m.Key()+m.Ptr().Code+m.Any.Key()
//idem:hash=m,n lease=1m
func (s *Svc) Handle(ctx context.Context, m *Msg, n int, _ string) (Out, error) { return Out{}, nil }

//idem:key=tenant+op+id ttl=1h op=svc.Other hash=none
func (s Svc) Other(ctx context.Context, id string, _ int) error { return nil }

//idem:key=id+"x"+pr+m.PS ttl=1h
func (s Svc) Bare(ctx context.Context, id *ID, v Named, _ int, pr PtrStr, m Msg) error { return nil }

type PtrStr struct{ X int }
func (*PtrStr) String() string { return "" }

var _ = pay.ErrClosed
`,
		"b.go": `package svc

import "context"

type Store interface {
	// Put puts.
	//idem:key=key retries=3 timeout=1s inflight=wait:500ms
	Put(ctx context.Context, key string, value []byte) ([]byte, error)
	Get(ctx context.Context, key string) ([]byte, error)
}
`,
	})
	require.NoError(t, err)
	require.Len(t, p.Types, 2)
	assert.Equal(t, ".", p.Dir)

	svc := p.Types[0]
	assert.Equal(t, "Svc", svc.Name)
	require.Len(t, svc.Methods, 3)
	h := svc.Methods[0]
	assert.Equal(t, 24*time.Hour, h.TTL, "ttl from defaults")
	assert.Equal(t, time.Minute, h.Lease, "own lease wins")
	require.Len(t, h.Final, 1)
	assert.Equal(t, "pay.ErrClosed", h.Final[0].Name)
	assert.Equal(t, "example.com/pay", h.Final[0].Var.Pkg().Path())
	assert.Equal(t, []int{1, 2}, h.Hash)
	assert.Equal(t, []string{"ctx", "m", "n", "p3"}, paramNames(h.Params))

	type want struct {
		enc   Encoding
		steps []Step
		nil   bool
	}
	wants := []want{
		{EncString, []Step{{Name: "Kind", NilCheck: true}}, false},
		{EncBytes, []Step{{Name: "UUID", NilCheck: true}}, false},
		{EncBytes, []Step{{Name: "Raw", NilCheck: true}}, false},
		{EncStringer, []Step{{Name: "N", NilCheck: true}}, false},
		{EncTextMarshal, []Step{{Name: "T", NilCheck: true}}, false},
		{EncUint, []Step{{Name: "Seq", NilCheck: true}}, false},
		{EncBool, []Step{{Name: "Ok", NilCheck: true}}, false},
		{EncString, []Step{{Name: "Base", NilCheck: true}, {Name: "Tenant", NilCheck: true}}, false},
		{EncInt, []Step{{Name: "Inner", NilCheck: true}, {Name: "Code", NilCheck: true}}, false},
		{EncString, []Step{{Name: "Key", Method: true, NilCheck: true}}, false},
		{EncInt, []Step{{Name: "Ptr", Method: true, NilCheck: true}, {Name: "Code", NilCheck: true}}, false},
		{EncString, []Step{{Name: "Any", NilCheck: true}, {Name: "Key", Method: true, NilCheck: true}}, false},
	}
	require.Len(t, h.Key, len(wants))
	for i, w := range wants {
		k := h.Key[i]
		assert.Equal(t, PartPath, k.Kind, k.Expr)
		assert.Equal(t, 1, k.Param, k.Expr)
		assert.Equal(t, w.enc, k.Encoding, k.Expr)
		assert.Equal(t, w.steps, untyped(t, k.Steps), k.Expr)
		assert.Equal(t, w.nil, k.NilCheck, k.Expr)
	}
	assert.Equal(t, "m.Inner.Code", h.Key[8].Expr)
	assert.Equal(t, h.Pos.Line-2, h.Key[8].Pos.Line)
	assert.Equal(t, 60, h.Key[8].Pos.Column)
	assert.Equal(t, "a.go", h.Key[8].Pos.Filename)

	o := svc.Methods[1]
	assert.Equal(t, "svc.Other", o.Op)
	assert.Nil(t, o.Result)
	assert.True(t, o.HashNone)
	assert.Empty(t, o.Hash)
	assert.Equal(t, []string{"ctx", "id", "p2"}, paramNames(o.Params))
	require.Len(t, o.Key, 3)
	assert.Equal(t, PartTenant, o.Key[0].Kind)
	assert.Equal(t, PartOp, o.Key[1].Kind)
	assert.Equal(t, PartPath, o.Key[2].Kind)
	assert.Equal(t, 1, o.Key[2].Param)

	b := svc.Methods[2]
	assert.Equal(t, EncStringer, b.Key[0].Encoding)
	assert.True(t, b.Key[0].NilCheck, "a bare *ID parameter")
	assert.Empty(t, b.Key[0].Steps)
	assert.Equal(t, []int{1, 2, 3, 4, 5}, b.Hash)
	assert.Equal(t, EncStringer, b.Key[2].Encoding, "pointer-receiver String on an addressable parameter")
	assert.Equal(t, EncStringer, b.Key[3].Encoding, "pointer-receiver String on a field of one")
	assert.False(t, b.Key[3].NilCheck)

	st := p.Types[1]
	assert.Equal(t, "Store", st.Name)
	assert.True(t, st.Interface)
	require.Len(t, st.Methods, 1)
	put := st.Methods[0]
	assert.Equal(t, "example.com/svc.Store.Put", put.Op)
	assert.Equal(t, "example.com/svc.Store.Put", put.FuncName)
	assert.Equal(t, 3*time.Second, put.TTL)
	assert.Equal(t, &Budget{Retries: 3, Timeout: time.Second}, put.Budget)
	assert.Equal(t, InflightWait, put.Inflight)
	assert.Equal(t, 500*time.Millisecond, put.Wait)
	assert.Equal(t, "b.go", put.Pos.Filename)
}

func paramNames(ps []Param) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestResolveCodecAccepts(t *testing.T) {
	_, p, err := load(t, map[string]string{"a.go": `package svc

import (
	"context"
	"time"
)

type Node struct {
	Name     string
	Children []*Node
	Parent   *Node ` + "`json:\"-,\"`" + `
	At       time.Time
	ByKey    map[Key]Node
	ByID     map[int64]string
	embedded
}
type embedded struct{ Extra int }
type Key struct{ a int }
func (Key) MarshalText() ([]byte, error) { return nil, nil }
func (*Key) UnmarshalText([]byte) error { return nil }

type Opaque struct{ v int }
func (Opaque) MarshalJSON() ([]byte, error) { return nil, nil }
func (*Opaque) UnmarshalJSON([]byte) error { return nil }

type S struct{}

//idem:key=id ttl=1s
func (S) A(ctx context.Context, id string) (*Node, error) { return nil, nil }

//idem:key=id ttl=1s
func (S) B(ctx context.Context, id string) ([]Opaque, error) { return nil, nil }

//idem:key=id ttl=1s
func (S) C(ctx context.Context, id string) (time.Time, error) { return time.Time{}, nil }

//idem:key=id ttl=1s
func (S) D(ctx context.Context, id string, any interface{ M() }, at time.Time) (map[string][2]uint8, error) { return nil, nil }
`})
	require.NoError(t, err)
	require.Len(t, p.Types[0].Methods, 4)
}

func TestResolveDefaultsKeyAndQualifiedAlias(t *testing.T) {
	_, p, err := load(t, map[string]string{"a.go": `package svc

import (
	"context"
	billing "example.com/pay"
)

//idem:defaults key=req.ID ttl=1h hash=req
type S struct{}

type Req struct{ ID int64 }

//idem:final=billing.ErrClosed
func (S) A(ctx context.Context, req Req, note string) error { return billing.ErrClosed }
`})
	require.NoError(t, err)
	m := p.Types[0].Methods[0]
	assert.Equal(t, EncInt, m.Key[0].Encoding)
	assert.Equal(t, []int{1}, m.Hash)
	require.Len(t, m.Final, 1)
	assert.Equal(t, "billing.ErrClosed", m.Final[0].Name)
	assert.Equal(t, "ErrClosed", m.Final[0].Var.Name())
	assert.Equal(t, time.Hour, m.TTL)
}

func TestResolveSortedAcrossFiles(t *testing.T) {
	_, _, err := load(t, map[string]string{
		"b.go": "package svc\n\nimport \"context\"\n\ntype T struct{}\n\n//idem:key=x ttl=1s\nfunc (T) M(ctx context.Context, id string) error { return nil }\n",
		"a.go": "package svc\n\n//idem:key=id\n\nfunc F() {}\n\n// F2.\n//idem:key=id ttl=1s\nfunc F2() {}\n",
	})
	require.Error(t, err)
	assert.Equal(t, []string{
		"a.go:3:1: //idem: detached from function F by a blank line: a doc comment ends on the line just above the declaration",
		"a.go:8:1: //idem: on function F2, which is not a method: annotate a method of a named type",
		`b.go:7:12: key: x is not a parameter of T.M (parameters: ctx, id)`,
	}, errLines(err))
}

func TestResolveInterfaceErrors(t *testing.T) {
	_, _, err := load(t, src(`type I interface {
	//idem:key=idd ttl=1s op=x
	A(ctx context.Context, id string) error
	//idem:key=id ttl=1s op=x
	B(ctx context.Context, id string) error
}
`))
	assert.Equal(t, []string{
		"svc.go:8:13: key: idd is not a parameter of I.A; did you mean \"id\"?",
	}, errLines(err))
	_, _, err = load(t, src(`type I interface {
	//idem:key=id ttl=1s op=x
	A(ctx context.Context, id string) error
	//idem:key=id ttl=1s op=x
	B(ctx context.Context, id string) error
}
`))
	assert.Equal(t, []string{
		"svc.go:10:26: op \"x\" is already used by I.A at 9:2: give one of them another op=",
	}, errLines(err))
}

// BenchmarkResolve resolves a package of 1,000 annotated methods in the
// generator benchmark's three shapes (internal/benchcmp), the resolver's
// share of a generate (issue 11).
func BenchmarkResolve(b *testing.B) {
	var body strings.Builder
	body.WriteString(`type Request struct{ ID, Customer string; Amount int64 }
type Refund struct{ Customer string; No int; Amount int64 }
type Result struct{ ID string; Amount int64 }

var ErrRejected = rejected{}

type rejected struct{}

func (rejected) Error() string { return "rejected" }

type Service struct{}
`)
	for i := range 1000 {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&body, "//idem:key=req.ID+req.Customer+op ttl=155s\nfunc (s *Service) M%04d(ctx context.Context, req *Request) (*Result, error) { return nil, nil }\n", i)
		case 1:
			fmt.Fprintf(&body, "//idem:key=r.Customer+\"refund\"+r.No retries=2 timeout=2s final=ErrRejected\nfunc (s *Service) M%04d(ctx context.Context, r Refund) (Result, error) { return Result{}, nil }\n", i)
		default:
			fmt.Fprintf(&body, "//idem:key=id ttl=7d hash=none\nfunc (s *Service) M%04d(ctx context.Context, id string) error { return nil }\n", i)
		}
	}
	files := src(body.String())
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "svc.go", files["svc.go"], parser.ParseComments)
	if err != nil {
		b.Fatal(err)
	}
	info := &types.Info{
		Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{},
		Types: map[ast.Expr]types.TypeAndValue{}, Implicits: map[ast.Node]types.Object{},
	}
	pkg, err := (&types.Config{Importer: &stubImporter{fset: fset, pkgs: map[string]*types.Package{}}}).Check("example.com/svc", fset, []*ast.File{f}, info)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ResolvePackage(fset, []*ast.File{f}, pkg, info); err != nil {
			b.Fatal(err)
		}
	}
}

// TestResolveClientKey: clientkey is the caller's idempotency key, a part
// that tells calls apart as a parameter does (a key of it alone is valid);
// a parameter named clientkey wins over it.
func TestResolveClientKey(t *testing.T) {
	_, p, err := load(t, map[string]string{"a.go": `package svc

import "context"

type S struct{}

type Req struct{ Amount int64 }

//idem:key=clientkey ttl=1h
func (S) Create(ctx context.Context, req Req) error { return nil }

//idem:key="tip"+clientkey+tenant ttl=1h
func (S) Tip(ctx context.Context, req Req) error { return nil }

//idem:key=clientkey ttl=1h
func (S) Named(ctx context.Context, clientkey string) error { return nil }
`})
	require.NoError(t, err)
	ms := p.Types[0].Methods
	require.Len(t, ms, 3)
	require.Len(t, ms[0].Key, 1)
	assert.Equal(t, PartClientKey, ms[0].Key[0].Kind)
	assert.Equal(t, []PartKind{PartLiteral, PartClientKey, PartTenant}, []PartKind{ms[1].Key[0].Kind, ms[1].Key[1].Kind, ms[1].Key[2].Kind})
	assert.Equal(t, PartPath, ms[2].Key[0].Kind, "the parameter wins")
}

// untyped returns steps without their Type, which every step must have
// (the generated file asserts it).
func untyped(t *testing.T, steps []Step) []Step {
	t.Helper()
	out := make([]Step, len(steps))
	for i, st := range steps {
		assert.NotNil(t, st.Type, "step %s has no type", st.Name)
		st.Type = nil
		out[i] = st
	}
	return out
}

// TestMaxOpLen: the generator refuses the operation names the stores refuse.
func TestMaxOpLen(t *testing.T) {
	assert.Equal(t, idem.MaxOpLen, MaxOpLen)
}
