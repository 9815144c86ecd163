package templates

import (
	"bytes"
	"fmt"
	"go/types"
	"strings"
	"testing"
	"time"

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
			fmt.Fprintf(&src, "func (s *Service) M%04d(ctx context.Context, req *Request, op string) (*Result, error) { return nil, nil }\n", i)
		case 1:
			fmt.Fprintf(&src, "func (s *Service) M%04d(ctx context.Context, r Refund) (Result, error) { return Result{}, nil }\n", i)
		default:
			fmt.Fprintf(&src, "func (s *Service) M%04d(ctx context.Context, id string) error { return nil }\n", i)
		}
	}
	pkg := check(tb, "example.com/svc", src.String())
	b := builder{tb, pkg}
	rejected := pkg.Scope().Lookup("ErrRejected")
	var methods []*annotations.Method
	for i := range n {
		name := fmt.Sprintf("M%04d", i)
		var m *annotations.Method
		switch i % 3 {
		case 0:
			m = b.method("Service", name, 155*time.Second, "req.ID", "req.Customer.ID", "op")
		case 1:
			m = b.method("Service", name, 0, "r.Customer", `"refund"`, "r.No")
			m.Budget = &annotations.Budget{Retries: 2, Timeout: 2 * time.Second, Backoff: 500 * time.Millisecond, Downstream: 2 * time.Minute, Margin: 30 * time.Second}
			m.TTL = 2*(m.Budget.Timeout+m.Budget.Backoff) + m.Budget.Downstream + m.Budget.Margin
			m.Final = []annotations.FinalRef{{Name: "ErrRejected", Var: rejected.(*types.Var)}}
			m.Inflight, m.Wait = annotations.InflightWait, 3*time.Second
		default:
			m = b.method("Service", name, 7*24*time.Hour, "id")
			m.HashNone, m.Hash = true, nil
		}
		methods = append(methods, m)
	}
	return &annotations.Package{Name: "svc", Path: "example.com/svc", Types: []*annotations.Type{b.typ("Service", methods...)}}
}

// renderGoimports is the former Render: jennifer's formatted output, then
// goimports (format only) for the import groups. Render must give the same
// bytes while formatting once.
func renderGoimports(t *testing.T, pkg *annotations.Package) []byte {
	t.Helper()
	f, err := File(pkg)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, f.Render(&buf))
	out, err := imports.Process(FileName, buf.Bytes(), &imports.Options{FormatOnly: true, Comments: true, TabIndent: true, TabWidth: 8})
	require.NoError(t, err)
	return out
}

func TestRenderMatchesGoimports(t *testing.T) {
	defer func(n int) { declsPerFormat = n }(declsPerFormat)
	for name, model := range map[string]func() *annotations.Package{
		"orders": func() *annotations.Package { return ordersModel(t) },
		"synth":  func() *annotations.Package { return synthModel(t, 30) },
	} {
		want := string(renderGoimports(t, model()))
		// Declarations formatted one by one, a few per pass, all in one.
		for _, perFormat := range []int{1, 3, 32, 100000} {
			declsPerFormat = perFormat
			got, err := Render(model())
			require.NoError(t, err, name)
			assert.Equal(t, want, string(got), "%s, %d declarations per format pass", name, perFormat)
		}
	}
}

func TestGroupImports(t *testing.T) {
	src := "package p\n\nimport (\n\"appengine/log\"\n\"context\"\n\"example.com/pay\"\nidem \"github.com/idemgen/idemgen/runtime/idem\"\n\"net/http\"\n\"time\"\n)\n\nvar x = 1\n"
	got, err := groupImports([]byte(src))
	require.NoError(t, err)
	assert.Equal(t, "package p\n\nimport (\n\"context\"\n\"net/http\"\n\"time\"\n\n\"example.com/pay\"\nidem \"github.com/idemgen/idemgen/runtime/idem\"\n\n\"appengine/log\"\n)\n\nvar x = 1\n", string(got))

	for _, src := range []string{
		"package p\n\nimport \"context\"\n\nvar x = 1\n",
		"package p\n\nimport (\n\"context\"\n\"time\"\n)\n\nvar x = 1\n",
		"package p\n\nvar x = 1\n",
	} {
		got, err := groupImports([]byte(src))
		require.NoError(t, err)
		assert.Equal(t, src, string(got))
	}
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
				if _, err := Render(model); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/method")
		})
	}
}
