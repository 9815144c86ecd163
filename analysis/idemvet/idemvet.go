// Package idemvet is an analysis.Analyzer for services that use idemgen: it
// reports, in the editor, in go vet and in golangci-lint, the mistakes that
// would otherwise show at go generate, at idemgen -check, or in production.
//
//   - Annotation errors: every error idemgen reports for the package, at
//     the same position with the same text. They come from the same code:
//     internal/generate.Package, which runs idemgen's resolver and emitter on
//     the package the pass type-checked.
//   - Stale generated code: idem_gen.go (or idem_gen_<constraint>.go) is not
//     what idemgen would write now, is missing, or is no longer needed,
//     reported at the package's first //idem: line (golangci-lint hides
//     what is reported in generated files). A stale file's diagnostic
//     carries the diff and a suggested fix that rewrites the file.
//   - Calls that bypass the wrapper: a call (or method value) of an
//     annotated method through the unwrapped receiver, in another package
//     than the method's, while the generated wrapper exists. An analysis
//     fact on each annotated method carries the annotation across packages.
//     Calls in _test.go files are allowed (tests exercise the service
//     itself), and so is a call on a line that carries, or follows a line
//     that is, a //idemvet:raw comment. Where the receiver is the wrapper's
//     embedded field (w.Service.Pay), the suggested fix calls the wrapper
//     (w.Pay).
//   - Executors and wrappers that cannot work although they compile:
//     idem.NewExecutor without idem.WithTenant or idem.SingleTenant (or with
//     both), with a nil store, idem.WithTenant(nil), a wrapper constructor
//     given a nil executor or a nil service, and a wrapper built as a
//     composite literal outside its package (its executor is unexported,
//     so it stays nil).
//
// On a package that does not type-check, the compiler's errors come first:
// the analyzer reports only a stale generated file, when the package's own
// files type-check without it (a request type changed without go generate
// is exactly that: idemgen's staleness guard in the generated file stops
// the build, and the diagnostic's fix rewrites the file). It says nothing
// else about such a package.
//
// Run it with go vet (cmd/idemvet), standalone, or as a golangci-lint
// module plugin (analysis/idemvet/gclplugin); docs/IDEMVET.md is the
// setup.
package idemvet

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"

	"github.com/idemgen/idemgen/annotations"
	"github.com/idemgen/idemgen/internal/generate"
	"github.com/idemgen/idemgen/templates"
)

// Analyzer reports idemgen's annotation errors, stale generated files,
// calls that bypass a generated wrapper, and executors or wrappers that
// cannot work. See the package documentation.
var Analyzer = &analysis.Analyzer{
	Name:      "idemvet",
	Doc:       doc,
	URL:       "https://github.com/idemgen/idemgen/blob/main/docs/IDEMVET.md",
	Run:       run,
	FactTypes: []analysis.Fact{new(Annotated), new(Wrapper)},
	// A stale generated file is a type error of its own (idemgen's
	// staleness guard): run to report it and offer the rewrite.
	RunDespiteErrors: true,
}

const doc = `check idemgen annotations, generated wrappers and their use

idemvet reports every error idemgen would report for a package, a generated
idem_gen.go that is stale (with the diff and a fix), a call of an annotated
method that bypasses its generated wrapper from another package (allowed in
_test.go files and on a line marked //idemvet:raw), and an idem.Executor or
wrapper that compiles but cannot work (no tenancy choice, nil executor).`

// RawDirective marks a call of an annotated method that is meant to bypass
// the wrapper: on the call's line, or alone on the line before it.
const RawDirective = "//idemvet:raw"

const runtimePath = "github.com/idemgen/idemgen/runtime/idem"

// Annotated is the fact that a method carries an //idem: annotation and
// that its package has the generated wrapper type Wrapper, made by Ctor.
type Annotated struct {
	Type, Wrapper, Ctor string
}

// AFact marks Annotated as an analysis fact.
func (*Annotated) AFact() {}

func (f *Annotated) String() string { return "annotated(" + f.Wrapper + ")" }

// Wrapper is the fact that a type or function is a generated wrapper type
// of Type, or its constructor. Ops are the operation names of the
// package's generated wrappers (op → the wrapped method's qualified name),
// for the op check of importing packages.
type Wrapper struct {
	Type string
	Ops  map[string]string
}

// AFact marks Wrapper as an analysis fact.
func (*Wrapper) AFact() {}

func (f *Wrapper) String() string { return "wrapper(" + f.Type + ")" }

func run(pass *analysis.Pass) (any, error) {
	var src []*ast.File
	mentions := false
	for _, f := range pass.Files {
		if generate.IsGeneratedSyntax(f) {
			mentions = true
			continue
		}
		if !isTest(pass, f) {
			src = append(src, f)
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				mentions = mentions || strings.Contains(c.Text, "idem:")
			}
		}
	}
	if len(pass.TypeErrors) > 0 {
		// Type information is partial: no facts, no uses. Only a stale
		// generated file, judged on the package's own files, which
		// checkGenerated type-checks again without the generated ones.
		if mentions && len(src) > 0 {
			checkGenerated(pass, src, true)
		}
		return nil, nil
	}
	// Every annotation and every generated file mentions "idem:": a
	// package without it (most of a program's dependencies) has nothing
	// to resolve or export.
	if mentions && len(src) > 0 {
		ops := packageOps(pass)
		exportFacts(pass, src, ops)
		checkOps(pass, src, ops)
		checkGenerated(pass, src, false)
	}
	checkUses(pass)
	return nil, nil
}

func isTest(pass *analysis.Pass, f *ast.File) bool {
	return strings.HasSuffix(pass.Fset.Position(f.Package).Filename, "_test.go")
}

// exportFacts marks every annotated method whose wrapper was generated, the
// wrapper type and its constructor.
func exportFacts(pass *analysis.Pass, src []*ast.File, ops map[string]string) {
	scope := pass.Pkg.Scope()
	for _, f := range src {
		anns, _ := annotations.ScanFile(pass.Fset, f)
		for _, a := range anns {
			var name *ast.Ident
			switch {
			case a.Decl != nil:
				name = a.Decl.Name
			case a.Field != nil && len(a.Field.Names) == 1:
				name = a.Field.Names[0]
			default:
				continue
			}
			fn, ok := pass.TypesInfo.Defs[name].(*types.Func)
			if !ok {
				continue
			}
			typeName := recvTypeName(fn)
			if typeName == "" && a.Field != nil && a.Type != nil {
				typeName = a.Type.Name.Name // the interface that declares it
			}
			if typeName == "" {
				continue
			}
			wrapper, ctor := templates.WrapperNames(typeName)
			wt, ok := scope.Lookup(wrapper).(*types.TypeName)
			if !ok {
				continue
			}
			pass.ExportObjectFact(fn, &Annotated{Type: typeName, Wrapper: wrapper, Ctor: ctor})
			pass.ExportObjectFact(wt, &Wrapper{Type: typeName, Ops: ops})
			if c, ok := scope.Lookup(ctor).(*types.Func); ok {
				pass.ExportObjectFact(c, &Wrapper{Type: typeName})
			}
		}
	}
}

// recvTypeName is the name of the named type fn is a method of ("" for a
// function).
func recvTypeName(fn *types.Func) string {
	recv := fn.Signature().Recv()
	if recv == nil {
		return ""
	}
	t := recv.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj().Name()
	}
	return ""
}

// checkGenerated reports idemgen's errors for the package, or its generated
// files that differ from what idemgen would write. On a package that does
// not type-check (broken), it reports only stale files: an error of
// idemgen's then is the compiler's error again, or waits for it.
func checkGenerated(pass *analysis.Pass, src []*ast.File, broken bool) {
	// The generator is fuzzed not to panic; if it ever does, the vet run
	// of every other package must not die with it.
	defer func() {
		if r := recover(); r != nil {
			pass.Reportf(src[0].Package, "idemvet: internal error in the generator (please report it with this package): %v", r)
		}
	}()
	dir := filepath.Dir(pass.Fset.Position(src[0].Package).Filename)
	ctx := context.Background()
	files, err := generate.Package(ctx, generate.Checked{
		Fset:      pass.Fset,
		Files:     pass.Files,
		Path:      pass.Pkg.Path(),
		Name:      pass.Pkg.Name(),
		Dir:       dir,
		Importer:  importerOf(pass),
		GoVersion: pass.Pkg.GoVersion(),
		Sizes:     pass.TypesSizes,
	})
	if errors.Is(err, generate.ErrConstrained) {
		// Other build configurations decide what the files hold: load
		// them as idemgen does.
		files, err = generate.Generate(ctx, generate.Config{Dir: dir, Patterns: []string{"."}})
	}
	if err != nil && broken {
		return
	}
	if err != nil {
		var list annotations.ErrorList
		if !errors.As(err, &list) {
			pass.Reportf(src[0].Package, "idemgen: %v", err)
			return
		}
		for _, e := range list {
			pos, ok := position(pass, e.Pos)
			switch {
			case ok:
				pass.Report(analysis.Diagnostic{Pos: pos, Message: e.Msg})
			case strings.HasSuffix(e.Pos.Filename, "_test.go"):
				// A test file of another variant of the package
				// (go vet checks the one that has it).
			default:
				// A file of another build configuration: at the
				// package clause, with its position.
				e.Pos.Filename = generate.ModuleRelative(e.Pos.Filename)
				pass.Reportf(src[0].Package, "%s: %s", e.Pos, e.Msg)
			}
		}
		return
	}
	for _, f := range files {
		checkFile(pass, src, f)
		// Deploy events against the committed file: a key, op or final=
		// sentinel changed since it was generated.
		for _, e := range f.Warnings {
			if pos, ok := position(pass, e.Pos); ok {
				pass.Report(analysis.Diagnostic{Pos: pos, Message: e.Msg})
			}
		}
	}
}

// checkFile reports the generated file f when the disk does not hold it.
func checkFile(pass *analysis.Pass, src []*ast.File, f generate.File) {
	name := filepath.Base(f.Path)
	var in *ast.File
	for _, g := range pass.Files {
		if pass.Fset.Position(g.Package).Filename == f.Path {
			in = g
		}
	}
	if in == nil {
		// Not compiled in this configuration: report it only when it
		// is not on disk either (else it is under a build constraint
		// this configuration does not satisfy).
		if !f.Delete && !fileExists(f.Path) {
			pass.Reportf(firstAnnotation(pass, src), "%s is missing: idemgen would write the wrappers of this package there; run go generate (idemgen)", name)
		}
		return
	}
	old, err := pass.ReadFile(f.Path)
	if err != nil {
		pass.Reportf(in.Package, "idemgen: reading %s: %v", name, err)
		return
	}
	if f.Delete {
		pass.Reportf(src[0].Package, "%s is no longer needed (no annotated method is compiled with it): run go generate (idemgen), which removes it", name)
		return
	}
	if string(old) == string(f.Content) {
		return
	}
	// At the first annotation, in the developer's own code: linters
	// (golangci-lint by default) hide what they report in generated
	// files. The fix edits the generated file.
	tf := pass.Fset.File(in.Package)
	pass.Report(analysis.Diagnostic{
		Pos:     firstAnnotation(pass, src),
		Message: fmt.Sprintf("%s is stale: idemgen would write it differently; run go generate (idemgen) or apply the suggested fix\n%s", name, shortDiff(name, old, f.Content)),
		SuggestedFixes: []analysis.SuggestedFix{{
			Message:   "rewrite " + name + " as idemgen would",
			TextEdits: []analysis.TextEdit{{Pos: token.Pos(tf.Base()), End: token.Pos(tf.Base() + tf.Size()), NewText: f.Content}},
		}},
	})
}

// maxDiffLines bounds the diff in a stale file's message.
const maxDiffLines = 40

func shortDiff(name string, old, new []byte) string {
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(old)), B: difflib.SplitLines(string(new)),
		FromFile: "a/" + name, ToFile: "b/" + name, Context: 1,
	})
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > maxDiffLines {
		lines = append(lines[:maxDiffLines], fmt.Sprintf("... (%d more lines)", len(lines)-maxDiffLines))
	}
	return strings.Join(lines, "\n")
}

// firstAnnotation is the position of the package's first //idem: line, or
// its package clause.
func firstAnnotation(pass *analysis.Pass, src []*ast.File) token.Pos {
	for _, f := range src {
		for _, g := range f.Comments {
			for _, c := range g.List {
				if annotations.IsDirective(c.Text) {
					return c.Pos()
				}
			}
		}
	}
	return src[0].Package
}

// position maps an error's position to the pass's files.
func position(pass *analysis.Pass, p token.Position) (token.Pos, bool) {
	if p.Filename == "" || p.Line <= 0 {
		return token.NoPos, false
	}
	for _, f := range pass.Files {
		tf := pass.Fset.File(f.Package)
		if tf == nil || tf.Name() != p.Filename || p.Line > tf.LineCount() {
			continue
		}
		pos := tf.LineStart(p.Line)
		if p.Column > 1 {
			off := tf.Offset(pos) + p.Column - 1
			if off > tf.Size() {
				off = tf.Size()
			}
			pos = tf.Pos(off)
		}
		return pos, true
	}
	return token.NoPos, false
}

// importerOf resolves the import paths of the pass's files to the packages
// the pass type-checked them against.
func importerOf(pass *analysis.Pass) types.Importer {
	m := map[string]*types.Package{}
	for _, f := range pass.Files {
		for _, spec := range f.Imports {
			if pn := pass.TypesInfo.PkgNameOf(spec); pn != nil {
				path := strings.Trim(spec.Path.Value, "\"`")
				m[path] = pn.Imported()
			}
		}
	}
	return importerFunc(func(path string) (*types.Package, error) {
		if path == "unsafe" {
			return types.Unsafe, nil
		}
		if p, ok := m[path]; ok {
			return p, nil
		}
		return nil, fmt.Errorf("idemvet: %s is not imported by the package", path)
	})
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// checkUses reports calls that bypass a wrapper and executors or wrappers
// that cannot work.
func checkUses(pass *analysis.Pass) {
	for _, f := range pass.Files {
		if generate.IsGeneratedSyntax(f) {
			continue
		}
		test := isTest(pass, f)
		raw := rawLines(pass, f)
		ast.Inspect(f, func(n ast.Node) bool {
			if !test {
				checkInjection(pass, n, raw)
			}
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if !test {
					checkBypass(pass, n, raw)
				}
			case *ast.CallExpr:
				checkCall(pass, n)
			case *ast.CompositeLit:
				checkLiteral(pass, n)
			}
			return true
		})
	}
}

// rawLines are the lines of f that a //idemvet:raw comment covers: its own
// line, and the next one when the comment is alone on its line.
func rawLines(pass *analysis.Pass, f *ast.File) map[int]bool {
	var lines map[int]bool
	for _, g := range f.Comments {
		for _, c := range g.List {
			if !strings.HasPrefix(c.Text, RawDirective) {
				continue
			}
			if lines == nil {
				lines = map[int]bool{}
			}
			line := pass.Fset.Position(c.Pos()).Line
			lines[line] = true
			lines[line+1] = true
		}
	}
	return lines
}

func checkBypass(pass *analysis.Pass, sel *ast.SelectorExpr, raw map[int]bool) {
	s, ok := pass.TypesInfo.Selections[sel]
	if !ok || (s.Kind() != types.MethodVal && s.Kind() != types.MethodExpr) {
		return
	}
	fn, ok := s.Obj().(*types.Func)
	if !ok || fn.Pkg() == nil || fn.Pkg() == pass.Pkg || fn.Pkg().Path() == pass.Pkg.Path() {
		return
	}
	var fact Annotated
	if !pass.ImportObjectFact(fn.Origin(), &fact) {
		return
	}
	if raw[pass.Fset.Position(sel.Sel.Pos()).Line] {
		return
	}
	qual := fn.Pkg().Name() + "."
	d := analysis.Diagnostic{
		Pos: sel.Sel.Pos(), End: sel.Sel.End(),
		Message: fmt.Sprintf("%s is annotated with //idem: and this call bypasses its wrapper: call %s on a %s%s (made by %s%s), "+
			"or mark a deliberate raw call with %s",
			methodName(fn, fact.Type), fn.Name(), qual, fact.Wrapper, qual, fact.Ctor, RawDirective),
	}
	// w.Service.Pay where w is the wrapper: call w.Pay.
	if inner, ok := ast.Unparen(sel.X).(*ast.SelectorExpr); ok && s.Kind() == types.MethodVal {
		if t := pass.TypesInfo.TypeOf(inner.X); t != nil && isNamed(t, fn.Pkg().Path(), fact.Wrapper) {
			d.SuggestedFixes = []analysis.SuggestedFix{{
				Message:   "call " + fn.Name() + " on the wrapper",
				TextEdits: []analysis.TextEdit{{Pos: inner.X.End(), End: inner.Sel.End()}},
			}}
		}
	}
	pass.Report(d)
}

func methodName(fn *types.Func, typeName string) string {
	recv := fn.Signature().Recv()
	if recv != nil {
		if _, ok := recv.Type().(*types.Pointer); ok {
			return fmt.Sprintf("(*%s.%s).%s", fn.Pkg().Name(), typeName, fn.Name())
		}
	}
	return fmt.Sprintf("%s.%s.%s", fn.Pkg().Name(), typeName, fn.Name())
}

// isNamed reports whether t is pkg.name or a pointer to it.
func isNamed(t types.Type, pkg, name string) bool {
	if p, ok := t.Underlying().(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == pkg && n.Obj().Name() == name
}

func checkCall(pass *analysis.Pass, call *ast.CallExpr) {
	fn, ok := typeutil.Callee(pass.TypesInfo, call).(*types.Func)
	if !ok || fn.Pkg() == nil {
		return
	}
	if fn.Pkg().Path() == runtimePath {
		switch fn.Name() {
		case "NewExecutor":
			checkExecutor(pass, call)
		case "WithTenant":
			if len(call.Args) == 1 && isNil(pass, call.Args[0]) {
				pass.Reportf(call.Pos(), "idem.WithTenant(nil) makes idem.NewExecutor panic: pass the function that reads the tenant from the context, or use idem.SingleTenant()")
			}
		}
		return
	}
	var w Wrapper
	if fn.Signature().Recv() != nil || !pass.ImportObjectFact(fn, &w) || len(call.Args) != 2 {
		return
	}
	if isNil(pass, call.Args[1]) {
		pass.Reportf(call.Args[1].Pos(), "%s with a nil executor: every annotated call of the wrapper panics; pass an idem.Executor (idem.NewExecutor)", fn.Name())
	}
	if isNil(pass, call.Args[0]) {
		pass.Reportf(call.Args[0].Pos(), "%s of a nil %s: every call of the wrapper panics; pass the service to wrap", fn.Name(), w.Type)
	}
}

// checkExecutor reports an idem.NewExecutor call that panics: a nil store,
// or options visible at the call (no opts... and each a direct call of an
// idem option) without exactly one tenancy choice.
func checkExecutor(pass *analysis.Pass, call *ast.CallExpr) {
	if len(call.Args) > 0 && isNil(pass, call.Args[0]) {
		pass.Reportf(call.Args[0].Pos(), "idem.NewExecutor with a nil store panics: pass a store (memstore.New(), pgstore.New, ...)")
	}
	if call.Ellipsis.IsValid() {
		return
	}
	tenancy := 0
	for _, a := range call.Args[min(1, len(call.Args)):] {
		c, ok := ast.Unparen(a).(*ast.CallExpr)
		if !ok {
			return // an option built elsewhere: it may be the tenancy
		}
		opt, ok := typeutil.Callee(pass.TypesInfo, c).(*types.Func)
		if !ok || opt.Pkg() == nil || opt.Pkg().Path() != runtimePath {
			return
		}
		if opt.Name() == "WithTenant" || opt.Name() == "SingleTenant" {
			tenancy++
		}
	}
	switch {
	case tenancy == 0:
		pass.Reportf(call.Lparen, "idem.NewExecutor without idem.WithTenant or idem.SingleTenant panics: "+
			"pass idem.WithTenant(f) to scope keys by the caller's tenant, or idem.SingleTenant() for one key space shared by every caller")
	case tenancy > 1:
		pass.Reportf(call.Lparen, "idem.NewExecutor with more than one tenancy option (idem.WithTenant, idem.SingleTenant) panics: choose one")
	}
}

// checkLiteral reports a wrapper built as a composite literal outside its
// package: its executor field is unexported and stays nil.
func checkLiteral(pass *analysis.Pass, lit *ast.CompositeLit) {
	t := pass.TypesInfo.TypeOf(lit)
	if t == nil {
		return
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg() == pass.Pkg || n.Obj().Pkg().Path() == pass.Pkg.Path() {
		return
	}
	var w Wrapper
	if !pass.ImportObjectFact(n.Obj(), &w) {
		return
	}
	_, ctor := templates.WrapperNames(w.Type)
	pass.Reportf(lit.Pos(), "a %s.%s literal has no executor (the field is unexported) and every annotated call panics: build it with %s.%s",
		n.Obj().Pkg().Name(), n.Obj().Name(), n.Obj().Pkg().Name(), ctor)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func isNil(pass *analysis.Pass, e ast.Expr) bool {
	tv, ok := pass.TypesInfo.Types[e]
	return ok && tv.IsNil()
}
