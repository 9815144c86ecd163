package annotations

import (
	"errors"
	"go/ast"
	"go/token"
	"strings"
)

// Annotation is a parsed //idem: doc comment bound to its declaration.
// Exactly one of Decl and Field is set for a method annotation; neither for
// a type's defaults.
type Annotation struct {
	Spec *Spec
	// Decl is the annotated method declaration (Spec.Defaults is false).
	Decl *ast.FuncDecl
	// Field is the annotated method of an interface type (Spec.Defaults is
	// false); Type is that interface type.
	Field *ast.Field
	// Type is the type whose doc comment holds //idem:defaults, or the
	// interface type that declares Field.
	Type *ast.TypeSpec

	// bad is set when Spec had parse errors: Spec holds what parsed, and
	// failed the options that did not, so that the resolver still reports
	// the mistakes only it can see (a key naming no parameter) without
	// those that follow from a parse error (a missing ttl that was written
	// malformed).
	bad    bool
	failed failedSet
}

// ScanFile finds every //idem: line of f, parses the doc comments that hold
// them and binds each to its declaration: a method, a method of an interface
// type, or (for //idem:defaults) a type. Every //idem: line anywhere else is
// an error, as is "// idem:" (with a space) followed by something that looks
// like an annotation. The annotations found are returned even when there
// are errors (an ErrorList).
func ScanFile(fset *token.FileSet, f *ast.File) ([]*Annotation, error) {
	s := &fileScanner{errs: errs{fset: fset}, file: f, done: map[*ast.CommentGroup]bool{}}
	s.typos()
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			s.funcDecl(d)
		case *ast.GenDecl:
			s.genDecl(d)
		}
	}
	for _, g := range f.Comments {
		if !s.done[g] && hasDirective(g) {
			s.stray(g)
		}
	}
	return s.found, s.err()
}

type fileScanner struct {
	errs
	file   *ast.File
	done   map[*ast.CommentGroup]bool
	found  []*Annotation
	bad    bool      // the last parse had errors
	failed failedSet // the options that failed in the last parse
}

func hasDirective(g *ast.CommentGroup) bool {
	if g == nil {
		return false
	}
	for _, c := range g.List {
		if IsDirective(c.Text) {
			return true
		}
	}
	return false
}

// firstDirective returns the position of g's first //idem: line.
func firstDirective(g *ast.CommentGroup) token.Pos {
	for _, c := range g.List {
		if IsDirective(c.Text) {
			return c.Slash
		}
	}
	return g.Pos()
}

// parse parses g (a doc comment with //idem: lines) and marks it done.
func (s *fileScanner) parse(g *ast.CommentGroup) *Spec {
	s.done[g] = true
	spec, failed, err := parse(s.fset, g)
	if l := ErrorList(nil); errors.As(err, &l) {
		s.list = append(s.list, l...)
	}
	s.bad, s.failed = err != nil, failed
	return spec
}

func (s *fileScanner) funcDecl(d *ast.FuncDecl) {
	if !hasDirective(d.Doc) {
		return
	}
	if d.Recv == nil {
		s.done[d.Doc] = true
		s.add(firstDirective(d.Doc), "//idem: on function %s, which is not a method: annotate a method of a named type", d.Name.Name)
		return
	}
	spec := s.parse(d.Doc)
	if spec == nil {
		return
	}
	if spec.Defaults {
		s.add(spec.Pos, "//idem:defaults on method %s: defaults go on the type's doc comment", d.Name.Name)
		return
	}
	s.found = append(s.found, &Annotation{Spec: spec, Decl: d, bad: s.bad, failed: s.failed})
}

func (s *fileScanner) genDecl(d *ast.GenDecl) {
	if d.Tok != token.TYPE {
		if hasDirective(d.Doc) {
			s.done[d.Doc] = true
			s.add(firstDirective(d.Doc), "//idem: on a %s declaration: annotate a method, or a type with //idem:defaults", d.Tok)
		}
		return
	}
	if hasDirective(d.Doc) {
		if d.Lparen.IsValid() && len(d.Specs) != 1 {
			s.done[d.Doc] = true
			s.add(firstDirective(d.Doc), "//idem: on a group of type declarations: put //idem:defaults on the doc comment of one type")
		} else {
			s.typeDoc(d.Specs[0].(*ast.TypeSpec), d.Doc)
		}
	}
	for _, sp := range d.Specs {
		ts := sp.(*ast.TypeSpec)
		if hasDirective(ts.Doc) {
			s.typeDoc(ts, ts.Doc)
		}
		if it, ok := ts.Type.(*ast.InterfaceType); ok {
			s.interfaceMethods(ts, it)
		}
	}
}

func (s *fileScanner) typeDoc(ts *ast.TypeSpec, doc *ast.CommentGroup) {
	spec := s.parse(doc)
	if spec == nil {
		return
	}
	if !spec.Defaults {
		s.add(spec.Pos, "//idem: on type %s: a type takes only //idem:defaults <options>; annotate its methods", ts.Name.Name)
		return
	}
	s.found = append(s.found, &Annotation{Spec: spec, Type: ts, bad: s.bad, failed: s.failed})
}

func (s *fileScanner) interfaceMethods(ts *ast.TypeSpec, it *ast.InterfaceType) {
	for _, m := range it.Methods.List {
		if !hasDirective(m.Doc) {
			continue
		}
		if _, isFunc := m.Type.(*ast.FuncType); !isFunc || len(m.Names) == 0 {
			s.done[m.Doc] = true
			s.add(firstDirective(m.Doc), "//idem: on an embedded type in interface %s: annotate a method", ts.Name.Name)
			continue
		}
		spec := s.parse(m.Doc)
		if spec == nil {
			continue
		}
		if spec.Defaults {
			s.add(spec.Pos, "//idem:defaults on method %s.%s: defaults go on the type's doc comment", ts.Name.Name, m.Names[0].Name)
			continue
		}
		s.found = append(s.found, &Annotation{Spec: spec, Field: m, Type: ts, bad: s.bad, failed: s.failed})
	}
}

// typos reports "// idem:key=..." and friends: annotations that Go tooling
// and this package would otherwise silently ignore.
func (s *fileScanner) typos() {
	for _, g := range s.file.Comments {
		for _, c := range g.List {
			if IsDirective(c.Text) {
				continue
			}
			if rest, ok := strings.CutPrefix(c.Text, "/*idem:"); ok && looksLikeOptions(rest) {
				s.add(c.Slash, "/*idem: block comments are not read: write //idem: line comments")
				continue
			}
			body, ok := strings.CutPrefix(c.Text, "//")
			if !ok {
				continue
			}
			t := strings.TrimLeft(body, " \t")
			rest, ok := strings.CutPrefix(t, "idem")
			if !ok {
				continue
			}
			colon := strings.HasPrefix(rest, ":")
			rest = strings.TrimPrefix(rest, ":")
			if !colon && !strings.HasPrefix(rest, " ") {
				continue // "//idempotent", "// idemgen"
			}
			if looksLikeOptions(strings.TrimLeft(rest, " \t")) {
				s.add(c.Slash, "%q is not an annotation: write //idem: with no space after // and a colon after idem", c.Text[:min(len(c.Text), len(c.Text)-len(rest))])
			}
		}
	}
}

// looksLikeOptions reports whether s starts like annotation options:
// "defaults", or a known option name followed by '='.
func looksLikeOptions(s string) bool {
	if strings.HasPrefix(s, "defaults") {
		return true
	}
	name, _, ok := strings.Cut(s, "=")
	return ok && isOption(strings.TrimSpace(name))
}

// stray reports a comment group with //idem: lines that is not the doc
// comment of a method or a type, saying where it is.
func (s *fileScanner) stray(g *ast.CommentGroup) {
	pos := firstDirective(g)
	if s.file.Doc == g || g.End() < s.file.Package {
		s.add(pos, "//idem: on the package clause: annotate a method, or a type with //idem:defaults")
		return
	}
	var (
		inBody   bool
		field    string
		inStruct bool
		prev     ast.Node
		next     ast.Node
	)
	ast.Inspect(s.file, func(n ast.Node) bool {
		if n == nil {
			return false
		}
		if _, isComment := n.(*ast.CommentGroup); isComment {
			return false
		}
		if _, isComment := n.(*ast.Comment); isComment {
			return false
		}
		if n.Pos() <= g.Pos() && g.End() <= n.End() {
			switch n.(type) {
			case *ast.BlockStmt:
				inBody = true
			case *ast.StructType:
				inStruct = true
			}
		}
		if n.End() <= g.Pos() && (prev == nil || n.End() > prev.End()) {
			prev = n
		}
		if n.Pos() >= g.End() && (next == nil || n.Pos() < next.Pos()) {
			next = n
		}
		if f, ok := n.(*ast.Field); ok && (f.Doc == g || f.Comment == g) {
			field = "field"
			if len(f.Names) > 0 {
				field = "field " + f.Names[0].Name
			}
		}
		return true
	})
	line := func(p token.Pos) int { return s.fset.Position(p).Line }
	switch {
	case inBody:
		s.add(pos, "//idem: inside a function body: annotations go in the doc comment of a method")
	case field != "":
		s.add(pos, "//idem: on struct %s: annotations go in the doc comment of a method", field)
	case prev != nil && line(prev.End()) == line(g.Pos()):
		s.add(pos, "//idem: in a trailing comment: annotations go in the doc comment of a method, on the lines just above it")
	case inStruct:
		s.add(pos, "//idem: inside a struct type: annotations go in the doc comment of a method")
	case next != nil && line(next.Pos()) > line(g.End())+1 && describeDecl(next) != "":
		s.add(pos, "//idem: detached from %s by a blank line: a doc comment ends on the line just above the declaration", describeDecl(next))
	case next != nil && describeDecl(next) != "":
		s.add(pos, "//idem: not in the doc comment of %s: annotate a method, or a type with //idem:defaults", describeDecl(next))
	default:
		s.add(pos, "//idem: belongs to no declaration: annotate a method, or a type with //idem:defaults")
	}
}

// describeDecl names a declaration for error messages, or returns "".
func describeDecl(n ast.Node) string {
	switch n := n.(type) {
	case *ast.FuncDecl:
		if n.Recv != nil && len(n.Recv.List) > 0 {
			return "method " + recvName(n.Recv.List[0].Type) + "." + n.Name.Name
		}
		return "function " + n.Name.Name
	case *ast.GenDecl:
		if n.Tok == token.TYPE && len(n.Specs) > 0 {
			return "type " + n.Specs[0].(*ast.TypeSpec).Name.Name
		}
		return "a " + n.Tok.String() + " declaration"
	case *ast.TypeSpec:
		return "type " + n.Name.Name
	case *ast.Field:
		if len(n.Names) > 0 {
			if _, ok := n.Type.(*ast.FuncType); ok {
				return "method " + n.Names[0].Name
			}
			return "field " + n.Names[0].Name
		}
	}
	return ""
}

// recvName returns the type name of a receiver type expression.
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}
