package generate

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/templates"

	"github.com/idemgen/idemgen/annotations"
)

// A deploy event is a change that regenerating makes to what records stored
// by the running release mean: a record key built another way (another
// key expression or op), or a final= sentinel a replay can no longer match
// with errors.Is. The generator sees the committed generated file and the
// types: deployEvents compares what the file says of each wrapped method
// with what the new one says, and warns at the annotation, with the way
// out. A warning does not stop the run: once the file is regenerated and
// committed, the change is the new baseline and the warning is gone.

// committed is what a generated file says of one wrapped method.
type committed struct {
	op    string
	key   string   // the key expression, as the wrapper's doc comment gives it
	names []string // the Name of every idem.FinalError, Final and Sentinels
}

// keyDoc finds the key expression in a wrapper's doc comment (the
// templates write "calls with the same key (EXPR) run it once").
var keyDoc = regexp.MustCompile(`calls with the same key \((.*)\) run it once`)

// CommittedOps returns the op of every wrapped method a generated file
// declares, by the method's qualified name (idem.Method.Func); nil when
// src does not parse.
func CommittedOps(src []byte) map[string]string {
	c := readCommitted(src)
	if c == nil {
		return nil
	}
	ops := make(map[string]string, len(c))
	for fn, m := range c {
		ops[fn] = m.op
	}
	return ops
}

// readCommitted parses a generated file and returns, by the wrapped
// method's qualified name (idem.Method.Func), what it says of each; nil
// when the file cannot be parsed.
func readCommitted(src []byte) map[string]committed {
	f, err := parser.ParseFile(token.NewFileSet(), "idem_gen.go", src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	byVar := map[string]*committed{}
	funcOf := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			vs, ok := spec.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
				continue
			}
			lit, ok := vs.Values[0].(*ast.CompositeLit)
			if sel, isSel := typeOf(lit); !ok || !isSel || sel != "Method" {
				continue
			}
			c := &committed{}
			for _, elt := range lit.Elts {
				kv, ok := elt.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch key, _ := kv.Key.(*ast.Ident); {
				case key == nil:
				case key.Name == "Op":
					c.op = stringLit(kv.Value)
				case key.Name == "Func":
					funcOf[vs.Names[0].Name] = stringLit(kv.Value)
				case key.Name == "Final" || key.Name == "Sentinels":
					list, _ := kv.Value.(*ast.CompositeLit)
					if list == nil {
						continue
					}
					for _, item := range list.Elts {
						fe, _ := item.(*ast.CompositeLit)
						if fe == nil {
							continue
						}
						for _, e := range fe.Elts {
							if kv, ok := e.(*ast.KeyValueExpr); ok {
								if k, _ := kv.Key.(*ast.Ident); k != nil && k.Name == "Name" {
									c.names = append(c.names, stringLit(kv.Value))
								}
							}
						}
					}
				}
			}
			byVar[vs.Names[0].Name] = c
		}
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Recv == nil || fd.Doc == nil || fd.Body == nil {
			continue
		}
		m := keyDoc.FindStringSubmatch(strings.Join(strings.Fields(fd.Doc.Text()), " "))
		if m == nil {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if c := byVar[id.Name]; c != nil {
					c.key = m[1]
				}
			}
			return true
		})
	}
	out := map[string]committed{}
	for v, fn := range funcOf {
		if c := byVar[v]; c != nil && fn != "" {
			out[fn] = *c
		}
	}
	return out
}

// typeOf returns the selector of a composite literal's type (Method of
// idem.Method), whatever the runtime's import name.
func typeOf(lit *ast.CompositeLit) (string, bool) {
	if lit == nil {
		return "", false
	}
	sel, ok := lit.Type.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	return sel.Sel.Name, true
}

func stringLit(e ast.Expr) string {
	if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
		if s, err := strconv.Unquote(bl.Value); err == nil {
			return s
		}
	}
	return ""
}

// deployEvents compares the committed generated file at path (when there
// is one) with model's methods and returns a warning for each deploy
// event, at the annotation.
func deployEvents(path string, model *annotations.Package) annotations.ErrorList {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	old := readCommitted(src)
	if len(old) == 0 {
		return nil
	}
	var list annotations.ErrorList
	for _, t := range model.Types {
		for _, m := range t.Methods {
			was, ok := old[m.FuncName]
			if !ok {
				continue
			}
			list = append(list, methodEvents(m, was)...)
		}
	}
	list.Sort()
	return list
}

// methodEvents are the deploy events between what the committed file says
// of m (was) and m.
func methodEvents(m *annotations.Method, was committed) annotations.ErrorList {
	var list annotations.ErrorList
	var parts []string
	for _, p := range m.Key {
		parts = append(parts, p.Expr)
	}
	key := strings.Join(parts, "+")
	keyPos := m.Pos
	if len(m.Key) > 0 && m.Key[0].Pos.IsValid() {
		keyPos = m.Key[0].Pos
	}
	if was.key != "" && was.key != key {
		list = append(list, &annotations.Error{Pos: keyPos, Msg: fmt.Sprintf(
			"deploy event: the key of %s changes from %s to %s: records stored by the running release are not found under the new key, "+
				"so a retry in flight across the deploy runs the method again; keep key=%s, or deploy it when no retry of the old release can arrive "+
				"(after its records' ttl, or with the callers drained); see docs/DEPLOYING.md",
			m.Name, was.key, key, was.key)})
	}
	if was.op != "" && was.op != m.Op {
		list = append(list, &annotations.Error{Pos: m.OpPos, Msg: fmt.Sprintf(
			"deploy event: the op of %s changes from %q to %q: records stored under the old op are not found, "+
				"so a retry in flight across the deploy runs the method again; pin op=%s, or accept it (docs/DEPLOYING.md)",
			m.Name, was.op, m.Op, was.op)})
	}
	var now []string
	for _, f := range m.Final {
		now = append(now, f.Name)
	}
	for _, f := range m.Sentinels {
		now = append(now, f.Name)
	}
	var gone []string
	for _, n := range was.names {
		if !slices.Contains(now, n) {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		list = append(list, &annotations.Error{Pos: m.Pos, Msg: fmt.Sprintf(
			"deploy event: %s no longer knows the sentinel %s: a record stored by the running release with that error replays "+
				"an error that errors.Is matches to no sentinel; keep %s declared and listed in final= beside the new name "+
				"(var %s = <the new sentinel> keeps errors.Is true for both) until the records' ttl has passed, or accept it (docs/DEPLOYING.md)",
			m.Name, strings.Join(gone, ", "), strings.Join(gone, ", "), gone[0])})
	}
	return list
}

// moduleDir returns the nearest directory at or above dir with a go.mod,
// or "".
func moduleDir(dir string) string {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

// committedOp is an op a committed generated file of another package
// declares.
type committedOp struct {
	fn, file string
}

// committedOps reads the ops of every committed generated file of the
// module under root, but those in the directories of skip (the packages of
// this run, whose ops checkOps compares as generated now). It skips what
// the go command skips: testdata, vendor, names starting with . or _, and
// nested modules.
func committedOps(root string, skip map[string]bool) map[string][]committedOp {
	ops := map[string][]committedOp{}
	_ = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if e.IsDir() {
			name := e.Name()
			if path != root {
				if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if skip[filepath.Dir(path)] || !strings.HasPrefix(e.Name(), "idem_gen") || !strings.HasSuffix(e.Name(), ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil || !bytes.HasPrefix(src, []byte(templates.Header)) {
			return nil
		}
		for fn, c := range readCommitted(src) {
			ops[c.op] = append(ops[c.op], committedOp{fn: fn, file: path})
		}
		return nil
	})
	return ops
}

// checkCommittedOps refuses an op of this run that a committed generated
// file of another package of the module declares for another method: with
// one //go:generate line per package (as the README recommends), two
// packages are never generated in one run, and two processes that each wire
// one of them would share records silently.
func (g *generator) checkCommittedOps() {
	if len(g.models) == 0 {
		return
	}
	skip := map[string]bool{}
	for _, p := range g.models {
		skip[p.Dir] = true
	}
	for _, dir := range g.runDirs {
		skip[dir] = true
	}
	roots := map[string]map[string][]committedOp{}
	for _, p := range g.models {
		root := moduleDir(p.Dir)
		if root == "" {
			continue
		}
		ops, ok := roots[root]
		if !ok {
			ops = committedOps(root, skip)
			roots[root] = ops
		}
		for _, t := range p.Types {
			for _, m := range t.Methods {
				for _, o := range ops[m.Op] {
					if o.fn == m.FuncName {
						continue
					}
					g.errs.push(&annotations.Error{Pos: m.OpPos, Msg: fmt.Sprintf(
						"op %q is already the op of %s in %s (generated in another run): methods under one op share records, so one "+
							"would be answered with the other's stored outcomes, also in two processes that each wire one; give one of "+
							"them another op= (if that file is stale, regenerate its package first)",
						m.Op, o.fn, ModuleRelative(o.file))})
				}
			}
		}
	}
}
