package generate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// staleCase is one shape of a type a wrapper keys or hashes by: a package
// main whose annotated method Svc.Do is generated from types (types.go)
// and, when set, other (package other, another package of the module); then
// the mutation (a replacement in types.go or other.go) is made without
// regenerating.
type staleCase struct {
	name  string
	types string // package main: the types, the annotated service and call
	other string // package other, or ""
	// from → to, in types.go, or in other.go when inOther.
	from, to string
	inOther  bool
	// call is the call of the wrapper w; "" is w.Do(ctx, arg).
	call string
	// runtime: the language cannot check the layout at compile time (an
	// unexported field or type of another package), so the build passes
	// and the first call is refused (idem.ErrStaleWrapper).
	runtime bool
}

// staleCases: every shape of a hashed or keyed type, mutated after
// generation (a field added, removed, renamed, retyped or moved; a named
// type's underlying type changed; a signature changed), in the package,
// nested, embedded, behind pointers, in slices and maps, in another
// package (exported and unexported), and generic.
var staleCases = []staleCase{
	{name: "FlatFieldAdded", types: flatReq, from: "Amount int64\n", to: "Amount int64\n\tCurrency string\n"},
	{name: "FlatFieldRemoved", types: flatReq, from: "\tAmount int64\n", to: ""},
	{name: "FlatFieldRenamed", types: flatReq, from: "Amount int64", to: "Total int64"},
	{name: "FlatFieldRetyped", types: flatReq, from: "Amount int64", to: "Amount float64"},
	{name: "FlatFieldsMoved", types: flatReq, from: "\tID     string\n\tAmount int64\n", to: "\tAmount int64\n\tID     string\n"},
	{name: "FlatPointerFieldAdded", types: strings.NewReplacer("req Req", "req *Req", "arg = Req", "arg = &Req").Replace(flatReq),
		from: "Amount int64\n", to: "Amount int64\n\tNote string\n"},
	{name: "FlatUnexportedFieldAdded", types: `type Req struct {
	id     string
	amount int64
}

var arg = Req{id: "a"}

//idem:key=req.id ttl=1h
func (s *Svc) Do(ctx context.Context, req Req) error { s.ran++; return nil }
`, from: "amount int64\n", to: "amount int64\n\tnote   string\n"},
	{name: "NamedFieldUnderlying", types: `type Currency string

type Req struct {
	ID  string
	Cur Currency
}

var arg = Req{ID: "a"}

//idem:key=req.ID ttl=1h
func (s *Svc) Do(ctx context.Context, req Req) error { s.ran++; return nil }
`, from: "type Currency string", to: "type Currency int"},
	{name: "KeyFieldRetyped", types: `type Req struct {
	ID   string
	Tags []string
}

var arg = Req{ID: "a"}

//idem:key=req.ID ttl=1h
func (s *Svc) Do(ctx context.Context, req Req) error { s.ran++; return nil }
`, from: "ID   string", to: "ID   int"},
	{name: "KeyNamedUnderlying", types: `type OrderID string

var arg = OrderID("a")

//idem:key=id ttl=1h
func (s *Svc) Do(ctx context.Context, id OrderID) error { s.ran++; return nil }
`, from: "type OrderID string", to: "type OrderID int"},
	{name: "KeyNestedRetyped", types: nestedReq, from: "type Customer struct{ ID string }", to: "type Customer struct{ ID int64 }"},
	{name: "KeyNestedPointerToValue", types: nestedReq, from: "Customer *Customer", to: "Customer Customer"},
	{name: "KeyEmbeddedRetyped", types: `type Base struct{ ID string }

type Req struct {
	Base
	Note string
}

var arg = Req{Base: Base{ID: "a"}}

//idem:key=req.ID ttl=1h
func (s *Svc) Do(ctx context.Context, req Req) error { s.ran++; return nil }
`, from: "type Base struct{ ID string }", to: "type Base struct{ ID uint8 }"},
	{name: "KeyMethodResult", types: `type Req struct{ N int }

func (r Req) Key() string { return "k" }

var arg = Req{N: 1}

//idem:key=req.Key() ttl=1h
func (s *Svc) Do(ctx context.Context, req Req) error { s.ran++; return nil }
`, from: `func (r Req) Key() string { return "k" }`, to: `func (r Req) Key() float64 { return 1.5 }`},
	{name: "KeyOtherPackage", other: "package other\n\ntype Ref struct{ ID string }\n", types: `type Req struct {
	Ref other.Ref
	N   int
}

var arg = Req{Ref: other.Ref{ID: "a"}}

//idem:key=req.Ref.ID ttl=1h
func (s *Svc) Do(ctx context.Context, req Req) error { s.ran++; return nil }
`, from: "ID string", to: "ID int32", inOther: true},
	{name: "FlatOtherPackage", other: "package other\n\ntype Payment struct {\n\tID     string\n\tAmount int64\n}\n", types: `var arg = other.Payment{ID: "a"}

//idem:key=p.ID ttl=1h
func (s *Svc) Do(ctx context.Context, p other.Payment) error { s.ran++; return nil }
`, from: "Amount int64\n", to: "Amount int64\n\tCurrency string\n", inOther: true},
	{name: "OtherPackageUnexportedField", other: "package other\n\ntype Payment struct {\n\tID   string\n\tnote string\n}\n", types: `var arg = other.Payment{ID: "a"}

//idem:key=p.ID ttl=1h
func (s *Svc) Do(ctx context.Context, p other.Payment) error { s.ran++; return nil }
`, from: "note string\n", to: "note string\n\tseq  int\n", inOther: true, runtime: true},
	{name: "OtherPackageUnexportedType", other: "package other\n\ntype amount int64\n\ntype Payment struct {\n\tID     string\n\tAmount amount\n}\n", types: `var arg = other.Payment{ID: "a"}

//idem:key=p.ID ttl=1h
func (s *Svc) Do(ctx context.Context, p other.Payment) error { s.ran++; return nil }
`, from: "type amount int64", to: "type amount float64", inOther: true, runtime: true},
	{name: "NestedSliceElement", types: `type Item struct{ SKU string }

type Req struct {
	ID    string
	Items []Item
}

var arg = Req{ID: "a", Items: []Item{{SKU: "x"}}}

//idem:key=req.ID ttl=1h
func (s *Svc) Do(ctx context.Context, req Req) error { s.ran++; return nil }
`, from: "type Item struct{ SKU string }", to: "type Item struct {\n\tSKU string\n\tQty int\n}", runtime: true},
	{name: "MapValue", types: `type Meta struct{ V string }

var arg = map[string]Meta{"a": {}}

//idem:key=id ttl=1h
func (s *Svc) Do(ctx context.Context, id string, m map[string]Meta) error { s.ran++; return nil }
`, call: `w.Do(ctx, "a", arg)`, from: "type Meta struct{ V string }", to: "type Meta struct{ V int64 }", runtime: true},
	{name: "SliceParam", types: `var arg = []string{"a"}

//idem:key=id ttl=1h
func (s *Svc) Do(ctx context.Context, id string, ids []string) error { s.ran++; return nil }
`, call: `w.Do(ctx, "a", arg)`, from: "ids []string", to: "ids []int"},
	{name: "SignatureParamAdded", types: `var arg = "a"

//idem:key=id ttl=1h
func (s *Svc) Do(ctx context.Context, id string) error { s.ran++; return nil }
`, from: "id string) error", to: "id string, n int) error"},
	{name: "Generic", types: `type Box[T any] struct{ V T }

var arg = Box[int]{V: 1}

//idem:key=b.V ttl=1h
func (s *Svc) Do(ctx context.Context, b Box[int]) error { s.ran++; return nil }
`, from: "type Box[T any] struct{ V T }", to: "type Box[T any] struct {\n\tV T\n\tN int\n}"},
}

const flatReq = `type Req struct {
	ID     string
	Amount int64
}

var arg = Req{ID: "a"}

//idem:key=req.ID ttl=1h
func (s *Svc) Do(ctx context.Context, req Req) error { s.ran++; return nil }
`

const nestedReq = `type Customer struct{ ID string }

type Req struct {
	Customer *Customer
	N        int
}

var arg = Req{Customer: &Customer{ID: "a"}}

//idem:key=req.Customer.ID ttl=1h
func (s *Svc) Do(ctx context.Context, req Req) error { s.ran++; return nil }
`

// TestStaleWrapper: for every shape of staleCases, the generated wrapper
// builds and runs the method; after the mutation, without go generate,
// either the build fails with a message that names idem.StaleRunGoGenerate
// (the first error in the generated file) or, where the language cannot
// express the check, the first call is refused with idem.ErrStaleWrapper,
// an error that says to run go generate, and the method does not run.
// Never a silent replay.
func TestStaleWrapper(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every case twice")
	}
	root := moduleRoot(t)
	dir := t.TempDir()
	gomod := fmt.Sprintf("module example.com/stale\n\ngo 1.26\n\nrequire github.com/idemgen/idemgen v0.0.0-00010101000000-000000000000\n\nreplace github.com/idemgen/idemgen => %s\n", root)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	for _, c := range staleCases {
		cdir := filepath.Join(dir, c.name)
		require.NoError(t, os.MkdirAll(cdir, 0o755))
		imports := "\t\"context\"\n\t\"errors\"\n\t\"fmt\"\n\n\t\"github.com/idemgen/idemgen/runtime/idem\"\n\t\"github.com/idemgen/idemgen/runtime/memstore\"\n"
		if c.other != "" {
			require.NoError(t, os.MkdirAll(filepath.Join(cdir, "other"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(cdir, "other", "other.go"), []byte(c.other), 0o644))
			imports += "\n\t\"example.com/stale/" + c.name + "/other\"\n"
		}
		call := c.call
		if call == "" {
			call = "w.Do(ctx, arg)"
		}
		src := "package main\n\nimport (\n" + imports + ")\n\ntype Svc struct{ ran int }\n\n" + c.types + `
func main() {
	s := &Svc{}
	w := NewIdempotentSvc(s, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	ctx := context.Background()
	err := ` + call + `
	switch {
	case errors.Is(err, idem.ErrStaleWrapper):
		fmt.Printf("refused (ran %d): %v\n", s.ran, err)
	case err != nil:
		fmt.Printf("error (ran %d): %v\n", s.ran, err)
	default:
		fmt.Printf("ok (ran %d)\n", s.ran)
	}
}

var _ = fmt.Sprint
`
		require.NoError(t, os.WriteFile(filepath.Join(cdir, "types.go"), []byte(src), 0o644))
	}
	ctx := context.Background()
	files, err := Generate(ctx, Config{Dir: dir, Patterns: []string{"./..."}, Env: append(os.Environ(), "GOFLAGS=-mod=mod")})
	require.NoError(t, err)
	for _, f := range files {
		require.NoError(t, os.WriteFile(f.Path, f.Content, 0o644))
	}
	bin := filepath.Join(dir, "bin") + string(filepath.Separator)
	goBuild := func(args ...string) (string, error) {
		cmd := exec.Command("go", append([]string{"build", "-mod=mod", "-o", bin}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := goBuild("./...")
	require.NoError(t, err, "the generated wrappers do not build:\n%s", out)
	run := func(name string) string {
		out, err := exec.Command(filepath.Join(bin, name)).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	for _, c := range staleCases {
		require.Equal(t, "ok (ran 1)\n", run(c.name), "%s before the change", c.name)
	}

	for _, c := range staleCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name, "types.go")
			if c.inOther {
				path = filepath.Join(dir, c.name, "other", "other.go")
			}
			src, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Contains(t, string(src), c.from)
			require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(src), c.from, c.to, 1)), 0o644))

			out, err := goBuild("./" + c.name)
			if c.runtime {
				require.NoError(t, err, "this shape builds; its first call is refused:\n%s", out)
				got := run(c.name)
				assert.True(t, strings.HasPrefix(got, "refused (ran 0): "), "%s", got)
				assert.Contains(t, got, "run go generate")
				return
			}
			require.Error(t, err, "a stale wrapper builds")
			var first string
			for line := range strings.SplitSeq(out, "\n") {
				if strings.Contains(line, "idem_gen.go:") {
					first = line
					break
				}
			}
			assert.Contains(t, first, "idem.StaleRunGoGenerate(", "the first error in the generated file must name go generate:\n%s", out)
			t.Logf("%s", first)
		})
	}
}
