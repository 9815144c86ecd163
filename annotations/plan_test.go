package annotations

import (
	"go/types"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFlatFields: structs whose fields are all of basic kinds are hashed
// field by field, every field (unexported, json:"-" and self-marshalling
// ones too: the method sees them all); the rest go to the runtime's
// canonical encoding.
func TestFlatFields(t *testing.T) {
	pkg := checkSrc(t, "example.com/fp", `package fp

import "time"

type Flat struct {
	ID      string
	Amount  int64 `+"`json:\"amount\"`"+`
	Rate    float64
	OK      bool
	Skipped string `+"`json:\"-\"`"+`
	hidden  int
}
type Cents int
type Named struct{ C Cents; U uint8 }
type Nested struct{ In Flat }
type WithTime struct{ At time.Time }
type Custom struct{ ID string }
func (Custom) MarshalJSON() ([]byte, error) { return nil, nil }
type Base struct{ ID string }
type Embedding struct{ Base }
type OnlyHidden struct{ a int }
type Stamp int
func (Stamp) MarshalText() ([]byte, error) { return nil, nil }
type HasStamp struct{ S Stamp }
`)
	names := func(typ string) []string {
		fields, ok := (&resolver{pkg: pkg}).flatFields(pkg.Scope().Lookup(typ).Type())
		if !ok {
			return nil
		}
		var out []string
		for _, f := range fields {
			out = append(out, f.Name())
		}
		return out
	}
	assert.Equal(t, []string{"ID", "Amount", "Rate", "OK", "Skipped", "hidden"}, names("Flat"), "unexported and json:\"-\" fields are hashed too")
	assert.Equal(t, []string{"C", "U"}, names("Named"), "named basic kinds are flat")
	assert.Equal(t, []string{"ID"}, names("Custom"), "a MarshalJSON does not hide fields from the method")
	assert.Equal(t, []string{"a"}, names("OnlyHidden"))
	assert.Equal(t, []string{"S"}, names("HasStamp"))
	for _, typ := range []string{"Nested", "WithTime", "Embedding"} {
		assert.Nil(t, names(typ), "%s goes to the canonical encoding", typ)
	}
	fields, ok := (&resolver{pkg: types.NewPackage("example.com/other", "other")}).flatFields(pkg.Scope().Lookup("OnlyHidden").Type())
	assert.False(t, ok, "an unexported field of another package cannot be named: %v", fields)
}

func TestHashAdd(t *testing.T) {
	pkg := checkSrc(t, "example.com/h", "package h\ntype Name string\ntype Big struct{}\ntype Raw []byte")
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
		assert.Equal(t, c.want, spellHash(hashValue("", c.t)), c.t.String())
	}
}

// TestBytesCode: every byte-like form converts to []byte; an array or
// slice of a named byte type goes through string, since []B does not
// convert to []byte.
func TestBytesCode(t *testing.T) {
	pkg := checkSrc(t, "example.com/b", "package b\ntype B byte\ntype A = byte\ntype ID [4]B\ntype UUID [16]byte\ntype Raw []byte\ntype Bs []B")
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
		assert.Equal(t, c.want, spellConv("x", bytesConversion(c.t)), c.t.String())
	}
}

// spellConv writes a conversion of v as the templates do.
func spellConv(v string, c Conversion) string {
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
		v = types.TypeString(c.To, (*types.Package).Name) + "(" + v + ")"
	}
	return v
}

// spellHash writes the Hasher call of hv on x as the templates do.
func spellHash(hv HashValue) string { return "h." + hv.Adder + "(" + spellConv("x", hv.Conv) + ")" }

// TestKeyConversion: each key encoding converts its value for its adder.
func TestKeyConversion(t *testing.T) {
	pkg := checkSrc(t, "example.com/kc", `package kc

import "time"

type ID string
type Seq int32
type Ptr struct{}
func (*Ptr) String() string { return "" }
type Val struct{}
func (Val) String() string { return "" }
type Deadline time.Time
`)
	lookup := func(name string) types.Type { return pkg.Scope().Lookup(name).Type() }
	timeT := lookup("Deadline").Underlying().(*types.Struct).Field(0).Pkg().Scope().Lookup("Time").Type()
	for _, c := range []struct {
		t    types.Type
		enc  Encoding
		want string
	}{
		{types.Typ[types.String], EncString, "x"},
		{lookup("ID"), EncString, "string(x)"},
		{lookup("Seq"), EncInt, "int64(x)"},
		{types.Typ[types.Int64], EncInt, "x"},
		{types.Typ[types.Uint16], EncUint, "uint64(x)"},
		{lookup("Ptr"), EncStringer, "&x"},
		{lookup("Val"), EncStringer, "x"},
		{timeT, EncTime, "x"},
		{types.NewPointer(timeT), EncTime, "*x"},
		{lookup("Deadline"), EncTime, "time.Time(x)"},
	} {
		assert.Equal(t, c.want, spellConv("x", keyConversion(c.t, c.enc)), c.t.String())
	}
}
