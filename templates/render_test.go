package templates

import (
	"errors"
	"fmt"
	"go/build/constraint"
	"go/format"
	"strings"
	"testing"

	"github.com/dave/jennifer/jen"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/tools/imports"

	"github.com/idemgen/idemgen/annotations"
)

// synthModel is a package of n annotated methods in the three shapes of the
// generator benchmark (internal/benchcmp): a pointer request with a path and
// op, a value request with a literal and a retry budget and a final error,
// and an error-only method with hash=none.
func synthModel(tb testing.TB, n int) *annotations.Package {
	tb.Helper()
	var src strings.Builder
	src.WriteString(`package svc

import (
	"context"
	"example.com/pay"
)

type Request struct {
	ID       string
	Customer *Customer
	Amount   pay.Amount
}

type Customer struct{ ID string }

type Refund struct {
	Customer string
	No       int
	Amount   int64
}

type Result struct {
	ID     string
	Amount int64
}

var ErrRejected error

type Service struct{}
`)
	for i := range n {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&src, "//idem:key=req.ID+req.Customer.ID+op ttl=155s\n")
			fmt.Fprintf(&src, "func (s *Service) M%04d(ctx context.Context, req *Request, op string) (*Result, error) { return nil, nil }\n", i)
		case 1:
			fmt.Fprintf(&src, "//idem:key=r.Customer+\"refund\"+r.No retries=2 timeout=2s backoff=500ms downstream=2m margin=30s final=ErrRejected inflight=wait:3s\n")
			fmt.Fprintf(&src, "func (s *Service) M%04d(ctx context.Context, r Refund) (Result, error) { return Result{}, nil }\n", i)
		default:
			fmt.Fprintf(&src, "//idem:key=id ttl=7d hash=none\n")
			fmt.Fprintf(&src, "func (s *Service) M%04d(ctx context.Context, id string) error { return nil }\n", i)
		}
	}
	return resolve(tb, "example.com/svc", src.String())
}

// TestRenderIsGofmtStable: the rendered file is what format.Source and
// goimports (format only, which also groups the imports) make of it, for
// models with struct and interface literal types in a signature, a doc
// comment line that reads as a list item and a long constructor key.
func TestRenderIsGofmtStable(t *testing.T) {
	for name, model := range map[string]func() *annotations.Package{
		"orders":  func() *annotations.Package { return ordersModel(t) },
		"synth":   func() *annotations.Package { return synthModel(t, 30) },
		"literal": func() *annotations.Package { return literalModel(t) },
		"long": func() *annotations.Package {
			// A key past go/printer's alignment limit in the constructor.
			return resolve(t, "example.com/long", `package long

import "context"

type AnOrderServiceWhoseNameIsLongerThanFortyBytes struct{}

//idem:key=id ttl=1h
func (s *AnOrderServiceWhoseNameIsLongerThanFortyBytes) Do(ctx context.Context, id string) error { return nil }
`)
		},
	} {
		got, err := renderFile(model())
		require.NoError(t, err, name)
		formatted, err := format.Source(got)
		require.NoError(t, err, name)
		assert.Equal(t, string(formatted), string(got), "%s: gofmt changes the output", name)
		grouped, err := imports.Process(FileName, got, &imports.Options{FormatOnly: true, Comments: true, TabIndent: true, TabWidth: 8})
		require.NoError(t, err, name)
		assert.Equal(t, string(grouped), string(got), "%s: goimports changes the output", name)
	}
}

// literalModel has a method whose signature spells struct and interface
// literal types and whose key literal holds a list marker that could start
// a doc comment line: the declarations go/printer lays out otherwise.
func literalModel(t *testing.T) *annotations.Package {
	return resolve(t, "example.com/lit", `package lit

import "context"

type Svc struct{}

//idem:key=id+"- 1. a list? - 2. no" ttl=1h hash=opts
func (s *Svc) Put(ctx context.Context, id string, opts struct{ A, B int; C string `+"`json:\"c\"`"+` }, f func(interface{ M() }) error) (struct{ N int }, error) {
	return struct{ N int }{}, nil
}
`)
}

func TestNamerScopes(t *testing.T) {
	pkg := newNamer(map[string]bool{"k": true}, predeclared)
	a := pkg.child(map[string]bool{"key": true})
	assert.Equal(t, "key2", a.name("k", "key"), "a child sees its parent's names and its own")
	assert.Equal(t, "v", a.name("v"))
	b := pkg.child(nil)
	assert.Equal(t, "key", b.name("k", "key"), "siblings do not see each other's names")
	assert.Equal(t, "v", b.name("v"))
	assert.False(t, pkg.isTaken("v"), "a child writes only its own layer")
	assert.False(t, universe.isTaken("v"))
	assert.Equal(t, "nil2", universe.child(nil).name("nil"))
	assert.Len(t, predeclared, len(universe.taken))
}

// BenchmarkRender renders synthetic packages of 10, 100 and 1,000 methods;
// ns/op ÷ methods should stay flat (issue 6: the generator's cost grows
// linearly with the methods at worst).
func BenchmarkRender(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		model := synthModel(b, n)
		b.Run(fmt.Sprintf("methods=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := renderFile(model); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/method")
		})
	}
}

// TestRenderRunsIsRenderWhole: building, rendering and formatting runs of
// declarations in parallel (renderRuns) gives the bytes of one go/format
// pass over the whole file (renderWhole), for every model of these tests
// and each file of a package with build constraints, with runs of one
// declaration, of a few and of the default size; and it declines, leaving
// the file to the whole-file pass, when a declaration renders nothing, the
// mark it cuts at turns up in a declaration or a run does not format. A
// declaration that does not build is the first error in file order.
func TestRenderRunsIsRenderWhole(t *testing.T) {
	models := map[string]func() *annotations.Package{
		"orders":   func() *annotations.Package { return ordersModel(t) },
		"synth":    func() *annotations.Package { return synthModel(t, 30) },
		"synth400": func() *annotations.Package { return synthModel(t, 400) },
		"literal":  func() *annotations.Package { return literalModel(t) },
	}
	for name, model := range models {
		pkg := model()
		// The whole package in one file, and one file per constraint
		// (the synthetic model's methods given three constraints).
		files := []*string{nil}
		if name == "synth" {
			cs := []string{"", "linux", "!linux && amd64"}
			for i, m := range pkg.Types[0].Methods {
				m.Constraint = cs[i%len(cs)]
			}
			for _, c := range cs {
				files = append(files, &c)
			}
		}
		for _, file := range files {
			g, err := newGen(pkg)
			require.NoError(t, err, name)
			g.file = file
			if file != nil && *file != "" {
				g.fileExpr, err = constraint.Parse("//go:build " + *file)
				require.NoError(t, err)
			}
			decls := g.decls()
			codes := make([]jen.Code, len(decls))
			for i, d := range decls {
				codes[i], err = d.build()
				require.NoError(t, err, name)
			}
			whole, err := g.renderWhole(decls, codes)
			require.NoError(t, err, name)
			for _, size := range []int{1, 3, runDecls} {
				runs, _, err := g.renderRuns(decls, size)
				require.NoError(t, err)
				require.NotNil(t, runs, "%s %v: renderRuns declined", name, file)
				require.Equal(t, string(whole), string(runs), "%s %v, runs of %d", name, file, size)
			}
			got, err := g.render()
			require.NoError(t, err, name)
			require.Equal(t, string(whole), string(got), "%s %v", name, file)
		}
	}

	g, err := newGen(ordersModel(t))
	require.NoError(t, err)
	one := jen.Var().Id("_").Op("=").Lit(1)
	built := func(codes ...jen.Code) []decl {
		ds := make([]decl, len(codes))
		for i, c := range codes {
			ds[i] = decl{build: func() (jen.Code, error) { return c, nil }}
		}
		return ds
	}
	for name, decls := range map[string][]decl{
		"empty declaration":     built(one, jen.Null(), one),
		"mark in a declaration": built(one, jen.Comment(declMark), one),
		"does not format":       built(one, jen.Id("func")),
		"nothing":               nil,
	} {
		for _, size := range []int{1, runDecls} {
			out, _, err := g.renderRuns(decls, size)
			assert.NoError(t, err, name)
			assert.Nil(t, out, name)
		}
	}

	first, second := errors.New("first"), errors.New("second")
	decls := built(one, one, one, one, one, one)
	decls[2].build = func() (jen.Code, error) { return nil, first }
	decls[5].build = func() (jen.Code, error) { return nil, second }
	for _, size := range []int{1, 2, runDecls} {
		_, _, err := g.renderRuns(decls, size)
		assert.Equal(t, first, err, "runs of %d", size)
	}
}

// TestRenderIsDeterministic: the runs of a file are built, rendered and
// formatted in parallel, in whatever order the goroutines take them, and
// the file is the same bytes every time, gofmt'd.
func TestRenderIsDeterministic(t *testing.T) {
	model := synthModel(t, 300)
	first, err := renderFile(model)
	require.NoError(t, err)
	formatted, err := format.Source(first)
	require.NoError(t, err)
	require.Equal(t, string(formatted), string(first), "gofmt changes the output")
	for range 3 {
		again, err := renderFile(model)
		require.NoError(t, err)
		require.Equal(t, string(first), string(again))
	}
}
