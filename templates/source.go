package templates

import (
	"fmt"
	"go/format"
	"go/token"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// source is generated Go source, written line by line in gofmt's layout:
// tab indentation, one statement per line, the spacing go/printer uses. The
// emitters write what gofmt would print, so that the file needs no gofmt
// pass (issue 11: gofmt of the whole output was half the generator's CPU
// time at 1,000 methods); TestRenderIsGofmtStable and the generative test
// check that format.Source leaves every output unchanged.
//
// Where the layout depends on more than the emitters know (a struct or
// interface literal type in a signature, a doc comment line gofmt would
// read as a list), the emitter calls reformat and render gofmts that one
// declaration.
type source struct {
	b      []byte
	indent int
	// format is set by reformat: the declaration being written needs a
	// gofmt pass of its own.
	format bool
}

// line writes one line at the current indentation.
func (s *source) line(parts ...string) {
	s.tabs()
	for _, p := range parts {
		s.b = append(s.b, p...)
	}
	s.b = append(s.b, '\n')
}

// tabs writes the current indentation.
func (s *source) tabs() {
	for range s.indent {
		s.b = append(s.b, '\t')
	}
}

// open writes a line that opens a block and indents what follows.
func (s *source) open(parts ...string) {
	s.line(parts...)
	s.indent++
}

// close ends a block with a line one level out.
func (s *source) close(parts ...string) {
	s.indent--
	s.line(parts...)
}

// reformat marks the declaration being written for a gofmt pass.
func (s *source) reformat() { s.format = true }

// keyed writes the elements of a multi-line composite literal, Key: value,
// one per line, with the values of consecutive single-line elements aligned
// as go/printer aligns them (a multi-line element, whose value holds
// newlines, is a section of its own). Keys longer than go/printer's
// alignment threshold leave the layout to gofmt.
func (s *source) keyed(elems []keyValue) {
	for i := 0; i < len(elems); {
		if strings.Contains(elems[i].value, "\n") {
			s.multiline(elems[i].key+": "+elems[i].value, ",")
			i++
			continue
		}
		j, width := i, 0
		for ; j < len(elems) && !strings.Contains(elems[j].value, "\n"); j++ {
			width = max(width, utf8.RuneCountInString(elems[j].key))
			if len(elems[j].key) > alignLimit {
				s.reformat()
			}
		}
		for _, e := range elems[i:j] {
			s.line(e.key, ":", pad(e.key, width+1), e.value, ",")
		}
		i = j
	}
}

// pad returns the blanks that align a cell holding text to width runes, as
// go/printer's tabwriter counts them.
func pad(text string, width int) string {
	return strings.Repeat(" ", width-utf8.RuneCountInString(text))
}

// alignLimit is go/printer's smallSize: keys up to this long are aligned
// without its size-ratio heuristic.
const alignLimit = 40

// multiline writes text whose later lines are indented relative to the
// first, at the current indentation, followed by suffix.
func (s *source) multiline(text, suffix string) {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if i == len(lines)-1 {
			l += suffix
		}
		s.line(l)
	}
}

// keyValue is one element of a keyed composite literal; a multi-line value
// has its inner lines indented by one tab relative to the key, its last
// line the closing brace.
type keyValue struct{ key, value string }

// block returns a multi-line braced list, "open{\n\titem,\n...}", for a
// keyValue value.
func block(open string, items []string) string {
	var b strings.Builder
	b.WriteString(open + "{")
	for _, it := range items {
		b.WriteString("\n\t" + it + ",")
	}
	b.WriteString("\n}")
	return b.String()
}

// render writes the file: the header and imports, then the declarations
// g.decls returns, one blank line apart, each gofmt'd on its own only when
// its emitter asked for it.
func (g *gen) render() ([]byte, error) {
	if err := g.badIdent(); err != nil {
		return nil, err
	}
	decls := g.decls()
	var body source
	body.b = make([]byte, 0, 1024*len(decls))
	for _, d := range decls {
		start := len(body.b)
		body.b = append(body.b, '\n')
		body.format = false
		if err := d.build(&body); err != nil {
			return nil, positioned(err)
		}
		if body.format {
			out, err := formatDecl(body.b[start+1:])
			if err != nil {
				return nil, internalError(d.pos, err)
			}
			body.b = append(body.b[:start+1], out...)
		}
	}
	head := g.header()
	return append(head, body.b...), nil
}

// formatDecl gofmts one top-level declaration (with its final newline).
func formatDecl(decl []byte) ([]byte, error) {
	const pkg = "package p\n\n"
	out, err := format.Source(append([]byte(pkg), decl...))
	if err != nil {
		return nil, err
	}
	return out[len(pkg):], nil
}

// header is the file's first lines: the generated-code comment, the build
// constraint, the package clause and the imports the declarations used,
// grouped as goimports groups them (the standard library, then paths whose
// first element has a dot), each group sorted by path.
func (g *gen) header() []byte {
	var s source
	s.line(Header)
	s.line()
	s.line("//go:build ", g.buildExpr())
	s.line()
	s.line("package ", g.pkg.Name)
	paths := slices.Sorted(maps.Keys(g.used))
	slices.SortStableFunc(paths, func(a, b string) int { return importGroup(a) - importGroup(b) })
	spec := func(path string) string {
		name := g.imports[path]
		if name == g.realNames[path] && name == assumedName(path) {
			return fmt.Sprintf("%q", path)
		}
		return name + " " + fmt.Sprintf("%q", path)
	}
	switch len(paths) {
	case 0:
	case 1:
		s.line()
		s.line("import ", spec(paths[0]))
	default:
		s.line()
		s.open("import (")
		for i, p := range paths {
			if i > 0 && importGroup(p) != importGroup(paths[i-1]) {
				s.b = append(s.b, '\n')
			}
			s.line(spec(p))
		}
		s.close(")")
	}
	return s.b
}

// qual returns name qualified by the import name of path, and records the
// import; a name of the generated file's own package is not qualified.
func (g *gen) qual(path, name string) string {
	if path == g.pkg.Path {
		return name
	}
	g.used[path] = true
	return g.imports[path] + "." + name
}

// rt returns a name of the runtime: idem.Do.
func (g *gen) rt(name string) string { return g.qual(RuntimePath, name) }

// badIdent returns an internal error at the first name of the model that
// is not a Go identifier (a model no resolver builds): the emitters write
// names as they are, without a parser behind them.
func (g *gen) badIdent() error {
	bad := func(pos token.Position, what string, names ...string) error {
		for _, name := range names {
			if !token.IsIdentifier(name) {
				return internalError(pos, fmt.Errorf("%s %q is not an identifier", what, name))
			}
		}
		return nil
	}
	var pos token.Position
	if len(g.pkg.Types) > 0 {
		pos = g.pkg.Types[0].Pos
	}
	if err := bad(pos, "package name", g.pkg.Name); err != nil {
		return err
	}
	for _, t := range g.pkg.Types {
		if err := bad(t.Pos, "type name", t.Name); err != nil {
			return err
		}
		for _, m := range t.Methods {
			names := []string{m.Name}
			for _, p := range m.Params {
				names = append(names, p.Name)
			}
			for _, k := range m.Key {
				for _, st := range k.Steps {
					names = append(names, st.Name)
				}
			}
			if err := bad(m.Pos, "name", names...); err != nil {
				return err
			}
		}
	}
	return nil
}

// docRisky reports whether a line of a doc comment's text would be
// rewritten by gofmt's doc comment formatter (a list item or a heading),
// so that the declaration needs a gofmt pass.
func docRisky(line string) bool {
	w, _, _ := strings.Cut(line, " ")
	switch {
	case w == "":
		return false
	case strings.ContainsAny(w[:1], "-*+#•\t"):
		return true
	case strings.HasPrefix(w, "•"):
		return true
	}
	if n := strings.TrimRight(w, ".)"); n != w && n != "" && strings.Trim(n, "0123456789") == "" {
		return true
	}
	return false
}
