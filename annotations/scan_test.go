package annotations

import (
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func scan(t *testing.T, src string) ([]*Annotation, []string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "a.go", src, parser.ParseComments)
	require.NoError(t, err)
	anns, err := ScanFile(fset, f)
	return anns, stripFile(errLines(err), "a.go")
}

func TestScanFileBinds(t *testing.T) {
	anns, errs := scan(t, `package p

// S is a service.
//idem:defaults ttl=1h
type S struct{}

// M does.
//idem:key=a
func (s *S) M(ctx context.Context, a string) error { return nil }

type (
	// I is an interface.
	//idem:defaults lease=5s
	I interface {
		// N does.
		//idem:key=b ttl=1s
		N(ctx context.Context, b string) error
		O() // no annotation
	}
)

// idem: is a package; this prose is not an annotation.
func plain() {}
`)
	require.Empty(t, errs)
	require.Len(t, anns, 4)
	assert.True(t, anns[0].Spec.Defaults)
	assert.Equal(t, "S", anns[0].Type.Name.Name)
	assert.Nil(t, anns[0].Decl)
	assert.Equal(t, "M", anns[1].Decl.Name.Name)
	assert.True(t, anns[2].Spec.Defaults)
	assert.Equal(t, "I", anns[2].Type.Name.Name)
	assert.Equal(t, "N", anns[3].Field.Names[0].Name)
	assert.Equal(t, "I", anns[3].Type.Name.Name)
}

func TestScanFileErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"detached", `package p

//idem:key=a ttl=1s

func (s *S) M() {}
`, []string{"3:1: //idem: detached from method S.M by a blank line: a doc comment ends on the line just above the declaration"}},
		{"detached from documented method", `package p

//idem:key=a ttl=1s

// M does.
func (s S) M() {}
`, []string{"3:1: //idem: detached from method S.M by a blank line: a doc comment ends on the line just above the declaration"}},
		{"plain function", `package p

// F does.
//idem:key=a ttl=1s
func F() {}
`, []string{"4:1: //idem: on function F, which is not a method: annotate a method of a named type"}},
		{"struct field doc", `package p

type S struct {
	//idem:key=a ttl=1s
	A string
}
`, []string{"4:2: //idem: on struct field A: annotations go in the doc comment of a method"}},
		{"struct field trailing", `package p

type S struct {
	A string //idem:key=a ttl=1s
}
`, []string{"4:11: //idem: on struct field A: annotations go in the doc comment of a method"}},
		{"end of struct", `package p

type S struct {
	A string

	//idem:key=a ttl=1s
}
`, []string{"6:2: //idem: inside a struct type: annotations go in the doc comment of a method"}},
		{"function body", `package p

func (s *S) M() {
	//idem:key=a ttl=1s
	x := 1
	_ = x
}
`, []string{"4:2: //idem: inside a function body: annotations go in the doc comment of a method"}},
		{"defaults on method", `package p

//idem:defaults ttl=1s
func (s *S) M() {}
`, []string{"3:1: //idem:defaults on method M: defaults go on the type's doc comment"}},
		{"method options on type", `package p

//idem:key=a ttl=1s
type S struct{}
`, []string{"3:1: //idem: on type S: a type takes only //idem:defaults <options>; annotate its methods"}},
		{"defaults on interface method", `package p

type I interface {
	//idem:defaults ttl=1s
	M()
}
`, []string{"4:2: //idem:defaults on method I.M: defaults go on the type's doc comment"}},
		{"embedded interface", `package p

type I interface {
	//idem:key=a ttl=1s
	J
}
`, []string{"4:2: //idem: on an embedded type in interface I: annotate a method"}},
		{"detached in interface", `package p

type I interface {
	//idem:key=a ttl=1s

	M()
}
`, []string{"4:2: //idem: detached from method M by a blank line: a doc comment ends on the line just above the declaration"}},
		{"type group", `package p

//idem:defaults ttl=1s
type (
	A struct{}
	B struct{}
)
`, []string{"3:1: //idem: on a group of type declarations: put //idem:defaults on the doc comment of one type"}},
		{"var", `package p

//idem:key=a ttl=1s
var x = 1
`, []string{"3:1: //idem: on a var declaration: annotate a method, or a type with //idem:defaults"}},
		{"package clause", `//idem:key=a ttl=1s
package p
`, []string{"1:1: //idem: on the package clause: annotate a method, or a type with //idem:defaults"}},
		{"trailing on method line", `package p

func (s *S) M() {} //idem:key=a ttl=1s
`, []string{"3:20: //idem: in a trailing comment: annotations go in the doc comment of a method, on the lines just above it"}},
		{"end of file", `package p

func (s *S) M() {}

//idem:key=a ttl=1s
`, []string{"5:1: //idem: belongs to no declaration: annotate a method, or a type with //idem:defaults"}},
		{"space after slashes", `package p

// idem:key=a ttl=1s
func (s *S) M() {}
`, []string{`3:1: "// idem:" is not an annotation: write //idem: with no space after // and a colon after idem`}},
		{"missing colon", `package p

//idem key=a ttl=1s
func (s *S) M() {}
`, []string{`3:1: "//idem" is not an annotation: write //idem: with no space after // and a colon after idem`}},
		{"space defaults", `package p

//  idem: defaults ttl=1s
type S struct{}
`, []string{`3:1: "//  idem:" is not an annotation: write //idem: with no space after // and a colon after idem`}},
		{"block comment", `package p

/*idem:key=a ttl=1s*/
func (s *S) M() {}
`, []string{"3:1: /*idem: block comments are not read: write //idem: line comments"}},
		{"parse errors come through", `package p

//idem:key=a tll=1s
func (s *S) M() {}
`, []string{`3:14: unknown option "tll"; did you mean "ttl"?`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := scan(t, tt.src)
			assert.Equal(t, tt.want, errs)
		})
	}
}
