package annotations

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSchemeFollowsTheLayout: the fingerprint scheme is a function of the
// hashed types' structure as the fingerprint encodes it: a change that
// changes the encoded bytes (a new field, another field type, a struct that
// stops being flat, another parameter) changes it; a rename does not; it is
// deterministic and never 0.
func TestSchemeFollowsTheLayout(t *testing.T) {
	pkg := checkSrc(t, "example.com/sch", `package sch

import "time"

type Req struct{ ID string; N int }
type Renamed struct{ Key string; Count int }
type MoreFields struct{ ID string; N int; Extra bool }
type OtherType struct{ ID string; N int64 }
type Reordered struct{ N int; ID string }
type WithTime struct{ ID string; At time.Time }
type WithTime2 struct{ ID string; At *time.Time }
type List struct{ Next *List; V int }
type Tree struct{ Kids []Tree; V int }
type Self1 struct{ ID string; f func() }
func (*Self1) IdemFingerprint() ([]byte, error) { return nil, nil }
type Self2 struct{ N int }
func (Self2) IdemFingerprint() ([]byte, error) { return nil, nil }
`)
	typ := func(name string) types.Type { return pkg.Scope().Lookup(name).Type() }
	r := &resolver{pkg: pkg}
	sch := func(names ...string) uint32 {
		var ts []types.Type
		var flat []bool
		for _, n := range names {
			_, f := r.flatFields(typ(n))
			ts, flat = append(ts, typ(n)), append(flat, f)
		}
		return r.schemeOf(false, ts, flat)
	}
	req := sch("Req")
	assert.Equal(t, req, sch("Req"), "deterministic")
	assert.Equal(t, req, sch("Renamed"), "names are not part of the layout")
	for _, other := range []string{"MoreFields", "OtherType", "Reordered", "WithTime"} {
		assert.NotEqual(t, req, sch(other), other)
	}
	assert.NotEqual(t, sch("WithTime"), sch("WithTime2"))
	assert.NotEqual(t, req, sch("Req", "Req"), "another parameter")
	assert.NotEqual(t, sch(), r.schemeOf(true, nil, nil), "hash=none differs from no parameter")
	assert.NotEqual(t, sch("List"), sch("Tree"), "recursive types terminate and differ")
	assert.NotEqual(t, req, r.schemeOf(false, []types.Type{typ("Req")}, []bool{false}), "flat or not changes the bytes")
	assert.Equal(t, sch("Self1"), sch("Self2"), "an idem.Fingerprinter's bytes are its own: its fields are not the layout")
	assert.NotEqual(t, req, sch("Self1"))
	for _, s := range []uint32{req, sch(), sch("List"), sch("Tree")} {
		assert.NotZero(t, s)
	}
}

// checkSrc type-checks src as package path, with the stub imports.
func checkSrc(t *testing.T, path, src string) *types.Package {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "src.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{Importer: &stubImporter{fset: fset, pkgs: map[string]*types.Package{}}}).Check(path, fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}
