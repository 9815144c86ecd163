package templates

import (
	"fmt"
	"go/types"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dave/jennifer/jen"
)

// eachType calls visit for t and for every type t is built from (elements,
// keys, type arguments, fields, parameters and results, embedded interfaces
// and methods), each once, parents first, until visit returns false. It is
// the one walk of the types generated code spells: walkPackages and
// spellable differ only in what they look for.
func eachType(t types.Type, visit func(types.Type) bool) {
	seen := map[types.Type]bool{}
	stop := false
	var walk func(types.Type)
	walk = func(t types.Type) {
		if t == nil || seen[t] || stop {
			return
		}
		seen[t] = true
		if !visit(t) {
			stop = true
			return
		}
		switch t := t.(type) {
		case *types.Alias:
			for a := range t.TypeArgs().Types() {
				walk(a)
			}
		case *types.Named:
			for a := range t.TypeArgs().Types() {
				walk(a)
			}
		case *types.Pointer:
			walk(t.Elem())
		case *types.Slice:
			walk(t.Elem())
		case *types.Array:
			walk(t.Elem())
		case *types.Map:
			walk(t.Key())
			walk(t.Elem())
		case *types.Chan:
			walk(t.Elem())
		case *types.Signature:
			for v := range t.Params().Variables() {
				walk(v.Type())
			}
			for v := range t.Results().Variables() {
				walk(v.Type())
			}
		case *types.Struct:
			for f := range t.Fields() {
				walk(f.Type())
			}
		case *types.Interface:
			for e := range t.EmbeddedTypes() {
				walk(e)
			}
			for m := range t.ExplicitMethods() {
				walk(m.Type())
			}
		}
	}
	walk(t)
}

// walkPackages calls visit for the package of every named type that t
// mentions, so that imports can be named before any code is emitted.
func walkPackages(t types.Type, visit func(*types.Package)) {
	eachType(t, func(t types.Type) bool {
		switch t := t.(type) {
		case *types.Basic:
			if t.Kind() == types.UnsafePointer {
				visit(types.Unsafe)
			}
		case *types.TypeParam: // spellable refuses it
		case interface{ Obj() *types.TypeName }: // *types.Alias, *types.Named
			if p := t.Obj().Pkg(); p != nil {
				visit(p)
			}
		}
		return true
	})
}

// typeCode spells t as go/types does (types.TypeString), with every package
// name the one this file imports it under: the qualifier marks each package
// path, and each qualified name becomes a jen.Qual, so that jennifer writes
// the chosen import name and records the import (google/wire spells types
// the same way). A type generated code cannot name is an error: a type
// declared inside a function, an unexported type or struct field or
// interface method of another package, a type parameter.
//
//	*Order   chan (<-chan int)   map[string]pay.Amount   func(int) error
func (g *gen) typeCode(t types.Type) (*jen.Statement, error) {
	var sp spelling
	if v, ok := g.spelled.Load(t); ok {
		sp = v.(spelling)
	} else {
		// Another goroutine may spell t too, alike; one spelling stays.
		v, _ := g.spelled.LoadOrStore(t, g.spell(t))
		sp = v.(spelling)
	}
	if sp.err != nil {
		return nil, sp.err
	}
	// A new statement each time: callers append to it.
	return jen.Add(sp.code), nil
}

// spelling is a type as typeCode writes it, kept per file: the parameters
// of many methods share their types.
type spelling struct {
	code *jen.Statement
	err  error
}

// spell spells t for typeCode.
func (g *gen) spell(t types.Type) spelling {
	if err := g.spellable(t); err != nil {
		return spelling{err: err}
	}
	const mark = "\x00"
	s := types.TypeString(t, func(p *types.Package) string {
		if p.Path() == g.pkg.Path {
			return ""
		}
		return mark + p.Path() + mark
	})
	code := jen.Null()
	for s != "" {
		i := strings.Index(s, mark)
		if i < 0 {
			code.Op(rawTags(s))
			break
		}
		if i > 0 {
			code.Op(rawTags(s[:i]))
		}
		s = s[i+len(mark):]
		j := strings.Index(s, mark)
		path := s[:j]
		s = strings.TrimPrefix(s[j+len(mark):], ".")
		n := 0
		for n < len(s) {
			r, size := utf8.DecodeRuneInString(s[n:])
			if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				break
			}
			n += size
		}
		code.Qual(path, s[:n])
		s = s[n:]
	}
	return spelling{code: code}
}

// quoted matches an interpreted string literal; the only ones in a type's
// spelling are struct tags.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// rawTags writes the struct tags of a piece of a type's spelling as raw
// strings, as they are written in source (json:"id" rather than
// "json:\"id\""), where a raw string can hold the tag.
func rawTags(s string) string {
	return quoted.ReplaceAllStringFunc(s, func(lit string) string {
		v, err := strconv.Unquote(lit)
		if err != nil || strings.ContainsAny(v, "`\r") {
			return lit
		}
		return "`" + v + "`"
	})
}

// spellable returns an error when a package other than that of the
// generated file cannot write t.
func (g *gen) spellable(t types.Type) error {
	var err error
	foreign := func(p *types.Package) bool { return p != nil && p.Path() != g.pkg.Path }
	eachType(t, func(t types.Type) bool {
		switch t := t.(type) {
		case *types.TypeParam:
			err = fmt.Errorf("type parameter %s cannot be named outside its declaration", t.Obj().Name())
		case interface{ Obj() *types.TypeName }: // *types.Alias, *types.Named
			switch obj := t.Obj(); {
			case obj.Pkg() == nil:
			case obj.Parent() != nil && obj.Parent() != obj.Pkg().Scope():
				err = fmt.Errorf("type %s is declared inside a function; generated code cannot name it", obj.Name())
			case foreign(obj.Pkg()) && !obj.Exported():
				err = fmt.Errorf("type %s of package %s is unexported; generated code cannot name it", obj.Name(), obj.Pkg().Path())
			}
		case *types.Basic:
			if t.Info()&types.IsUntyped != 0 {
				err = fmt.Errorf("untyped %s has no spelling in a signature", t.Name())
			}
		case *types.Struct:
			for f := range t.Fields() {
				if !f.Exported() && foreign(f.Pkg()) {
					err = fmt.Errorf("struct field %s of package %s is unexported; generated code cannot write the struct type", f.Name(), f.Pkg().Path())
					break
				}
			}
		case *types.Interface:
			for m := range t.ExplicitMethods() {
				if !m.Exported() && foreign(m.Pkg()) {
					err = fmt.Errorf("interface method %s of package %s is unexported; generated code cannot write the interface type", m.Name(), m.Pkg().Path())
					break
				}
			}
		}
		return err == nil
	})
	return err
}
