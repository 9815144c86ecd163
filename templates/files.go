package templates

import (
	"fmt"
	"go/build/constraint"
	"maps"
	"slices"

	"github.com/idemgen/idemgen/annotations"
)

// Output is one generated file of a package.
type Output struct {
	// Constraint is the build constraint of the annotated declarations the
	// file holds ("" for none); the file carries it in its //go:build line.
	Constraint string
	// Content is the file's gofmt'd source.
	Content []byte
}

// RenderFiles returns one file per build constraint of pkg's types and
// methods (Type.Constraint, Method.Constraint), the unconstrained one first,
// then by constraint. Each file carries //go:build <constraint> && !idemgen
// and holds the wrapper types and constructors of the types declared under
// that constraint, and the wrapper methods of the methods declared under it:
// a wrapper type exists wherever its type does, and a wrapper method only
// where its method does. Names are planned once for the whole package, so
// that the files agree on them. Without constraints it is one file.
func RenderFiles(pkg *annotations.Package) ([]Output, error) {
	keys := map[string]bool{}
	if pkg != nil {
		for _, t := range pkg.Types {
			keys[t.Constraint] = true
			for _, m := range t.Methods {
				keys[m.Constraint] = true
			}
		}
	}
	var out []Output
	for _, k := range slices.Sorted(maps.Keys(keys)) { // "" first
		g, err := newGen(pkg)
		if err != nil {
			return nil, err
		}
		g.file = &k
		if k != "" {
			if g.fileExpr, err = constraint.Parse("//go:build " + k); err != nil {
				return nil, fmt.Errorf("idemgen: build constraint %q: %w", k, err)
			}
		}
		content, err := g.render()
		if err != nil {
			return nil, err
		}
		out = append(out, Output{Constraint: k, Content: content})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("idemgen: nothing to generate")
	}
	return out, nil
}

// inFile reports whether a declaration under the build constraint k goes
// to the file being rendered.
func (g *gen) inFile(k string) bool { return g.file == nil || *g.file == k }

// buildExpr is the expression of the file's //go:build line: !idemgen, so
// that a stale file never blocks the next run, and the constraint of the
// file's declarations.
func (g *gen) buildExpr() string {
	not := &constraint.NotExpr{X: &constraint.TagExpr{Tag: BuildTag}}
	if g.fileExpr == nil {
		return not.String()
	}
	return (&constraint.AndExpr{X: g.fileExpr, Y: not}).String()
}
