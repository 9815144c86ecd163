// Package generate is idemgen as a pure function: package patterns in, the
// idem_gen.go and idem_gen_<constraint>.go files to write or delete (or the
// errors) out. It loads the packages (once, or once per build configuration
// for a package with build constraints), resolves their annotations and
// renders the templates; it writes nothing. cmd/idemgen is the thin driver
// that commits the result.
package generate

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/annotations"
	"github.com/idemgen/idemgen/templates"
)

// Config says what to generate.
type Config struct {
	// Dir is the directory the patterns are relative to; "" is the current
	// directory.
	Dir string
	// Patterns are go/packages patterns (".", "./...", import paths); none
	// means ".".
	Patterns []string
	// Tags are build tags besides idemgen, which is always set; they are
	// set in every build configuration the generator tries.
	Tags []string
	// Env is the environment of the go command; nil is the process's.
	Env []string
}

// File is one file the generator wants on disk.
type File struct {
	// Path is the absolute path of the file.
	Path string
	// PkgPath is the import path of the package it belongs to.
	PkgPath string
	// Content is the file's bytes; nil when Delete is set.
	Content []byte
	// Delete marks a stale generated file: its package has no annotations
	// any more, or none under its build constraint.
	Delete bool
	// Warnings are the deploy events that writing Content over the file
	// on disk makes (a key expression, an op or a final= sentinel that
	// changed; see deploy.go), at the annotations, module-relative
	// positions left to the printer. They do not stop the run.
	Warnings annotations.ErrorList
}

// loadMode is the narrowest mode that gives syntax and types of the named
// packages; dependencies come from export data (no NeedDeps).
const loadMode = packages.NeedName | packages.NeedFiles | packages.NeedSyntax |
	packages.NeedTypes | packages.NeedTypesInfo

// Generate loads the packages cfg names (with the idemgen build tag, so
// that stale generated files are left out) and returns, sorted by path, the
// generated files of every package with annotations and a deletion for every
// generated file no annotated method needs any more. A package with build
// constraints is loaded once more in each other build configuration that
// compiles different files of it (see constraints.go), and gets one file per
// constraint. On annotation, load or type errors it returns no file and an
// annotations.ErrorList with every error, sorted by position; other failures
// (the go command could not run) are plain errors.
func Generate(ctx context.Context, cfg Config) ([]File, error) {
	patterns := cfg.Patterns
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	tags := append([]string{templates.BuildTag}, cfg.Tags...)
	fset := token.NewFileSet()
	pkgs, err := packages.Load(&packages.Config{
		Context:    ctx,
		Mode:       loadMode,
		Dir:        cfg.Dir,
		Env:        cfg.Env,
		BuildFlags: []string{"-tags=" + strings.Join(tags, ",")},
		Fset:       fset,
	}, patterns...)
	if err != nil {
		return nil, fmt.Errorf("idemgen: loading %s: %w", strings.Join(patterns, " "), err)
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	loaded := map[string]bool{}
	for _, pkg := range pkgs {
		loaded[pkg.Dir] = true
	}
	// A package none of whose files the current configuration compiles
	// is left out of a ./... pattern by the go command: find those with
	// annotations under a build constraint.
	for _, hidden := range hiddenPackages(dir, patterns, loaded) {
		pkgs = append(pkgs, &packages.Package{Dir: hidden, Errors: []packages.Error{{
			Msg: "build constraints exclude all Go files in " + hidden, Kind: packages.ListError}}})
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("idemgen: %s matched no packages", strings.Join(patterns, " "))
	}

	g := &generator{ctx: ctx, cfg: cfg, wd: dir}
	for _, pkg := range pkgs {
		g.addPackage(pkg)
	}
	g.loadConfigs()
	var files []File
	for _, j := range g.jobs {
		files = append(files, g.constrained(j)...)
	}
	files = append(files, g.files...)
	g.checkOps()
	for _, pkg := range pkgs {
		if pkg.Dir != "" {
			g.runDirs = append(g.runDirs, pkg.Dir)
		}
	}
	g.checkCommittedOps()
	if len(g.errs.list) > 0 {
		g.errs.list.Sort()
		return nil, g.errs.list
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// generator is one run of Generate.
type generator struct {
	ctx   context.Context
	cfg   Config
	wd    string // the directory the go command runs in
	errs  errorCollector
	files []File
	// tc is the toolchain's list of configurations, read when the first
	// package with build constraints needs it.
	tc *toolchain
	// jobs are the packages with build constraints, whose other
	// configurations loadConfigs loads.
	jobs []*job
	// models are the resolved packages, for checkOps.
	models []*annotations.Package
	// runDirs are the directories of every package of the run, whose
	// committed files checkCommittedOps does not read.
	runDirs []string
}

// job is a package with build constraints.
type job struct {
	base    *packages.Package // loaded in the current configuration; nil when it has no files there
	dir     string
	pkgPath string
	d       *dirFiles
	sets    []configSet
	// pkgs[i] is the package loaded in sets[i]; errs[i] its load errors.
	pkgs []*packages.Package
	errs []errorCollector
}

// addPackage generates the files of a package without build constraints,
// or queues a job for one with.
func (g *generator) addPackage(pkg *packages.Package) {
	dir := pkg.Dir
	if dir == "" && len(pkg.GoFiles) > 0 {
		dir = filepath.Dir(pkg.GoFiles[0])
	}
	// A package with no file in the current configuration may have some
	// in another: its load error waits for the scan of its directory.
	excluded := excludedAll(pkg) && dir != ""
	if !excluded && g.errs.load(pkg, g.wd) {
		return
	}
	if dir == "" {
		return
	}
	d := g.scanPackage(pkg, dir, excluded)
	if d == nil {
		return
	}
	if g.tc == nil {
		tc, err := loadToolchain(g.ctx, g.cfg)
		if err != nil {
			g.errs.add(pkg, err)
			return
		}
		g.tc = tc
	}
	sets, err := g.tc.configSets(d)
	if err != nil {
		pos := token.Position{Filename: dir}
		for _, f := range d.files {
			if f.annotation.IsValid() {
				pos = f.annotation
				break
			}
		}
		g.errs.push(&annotations.Error{Pos: pos, Msg: err.Error()})
		return
	}
	j := &job{dir: dir, pkgPath: pkg.PkgPath, d: d, sets: sets, pkgs: make([]*packages.Package, len(sets)), errs: make([]errorCollector, len(sets))}
	if !excluded {
		j.base = pkg
	}
	g.jobs = append(g.jobs, j)
}

// scanPackage checks the test files and the directory of pkg and, when no
// file of the directory has a build constraint, generates the package's
// files (or records its errors) and returns nil. With build constraints it
// returns the directory's files, for a job.
func (g *generator) scanPackage(pkg *packages.Package, dir string, excluded bool) *dirFiles {
	fset := pkg.Fset
	if fset == nil {
		fset = token.NewFileSet()
	}
	if list := testFileAnnotations(fset, dir); len(list) > 0 {
		for _, e := range list {
			g.errs.push(e)
		}
		return nil
	}
	d, errs := scanDir(dir)
	if len(errs) > 0 {
		g.errs.add(pkg, errs)
		return nil
	}
	if !excluded {
		d.only(pkg.Name)
	}
	if d.constrained() {
		return d
	}
	if excluded {
		g.errs.load(pkg, g.wd)
		return nil
	}
	model, err := annotations.ResolvePackage(pkg.Fset, pkg.Syntax, pkg.Types, pkg.TypesInfo)
	if err != nil {
		g.errs.add(pkg, err)
		return nil
	}
	g.output(pkg, dir, d, model)
	return nil
}

// hiddenPackages returns, sorted, the directories under the patterns of the
// form dir/... (relative to wd, or absolute) that the load did not return
// and that hold an annotated file under a build constraint. It skips what
// the go command skips: testdata, vendor, names starting with . or _, and
// other modules.
func hiddenPackages(wd string, patterns []string, loaded map[string]bool) []string {
	var found []string
	seen := map[string]bool{}
	for _, p := range patterns {
		root, ok := strings.CutSuffix(p, "...")
		if !ok || (root != "" && !strings.HasSuffix(root, "/")) || !(filepath.IsAbs(p) || strings.HasPrefix(p, ".")) {
			continue
		}
		if !filepath.IsAbs(root) {
			root = filepath.Join(wd, root)
		}
		_ = filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			name := e.Name()
			if path != root {
				if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			if loaded[path] || seen[path] {
				return nil
			}
			seen[path] = true
			d, _ := scanDir(path)
			if d == nil {
				return nil
			}
			for _, f := range d.files {
				if f.expr != nil && f.annotation.IsValid() {
					found = append(found, path)
					break
				}
			}
			return nil
		})
	}
	slices.Sort(found)
	return found
}

// excludedAll reports whether the only error of pkg is that no file of it
// is compiled in the current configuration.
func excludedAll(pkg *packages.Package) bool {
	for _, e := range pkg.Errors {
		if !strings.Contains(e.Msg, "build constraints exclude all Go files") {
			return false
		}
	}
	return len(pkg.Errors) > 0
}

// loadConfigs loads every job's package in each of its configurations, one
// go command per configuration for all the packages that need it; the
// current configuration's is the package already loaded. Where the package
// does not build in a configuration, the next alternative with the same
// files is loaded instead, in another round.
func (g *generator) loadConfigs() {
	type request struct {
		c    config
		need []*job
		idx  []int
	}
	type pending struct {
		j *job
		i int
	}
	// first keeps the configuration and errors of a set's first failure,
	// which are the ones reported when no alternative builds either.
	type failure struct {
		c    config
		errs errorCollector
	}
	first := map[pending]failure{}
	var todo []pending
	for _, j := range g.jobs {
		for i, s := range j.sets {
			if j.base != nil && s.config.String() == g.tc.base.String() {
				j.pkgs[i] = j.base
				continue
			}
			todo = append(todo, pending{j, i})
		}
	}
	for len(todo) > 0 {
		byConfig := map[string]*request{}
		var order []string
		for _, p := range todo {
			id := p.j.sets[p.i].config.String()
			r := byConfig[id]
			if r == nil {
				r = &request{c: p.j.sets[p.i].config}
				byConfig[id] = r
				order = append(order, id)
			}
			r.need, r.idx = append(r.need, p.j), append(r.idx, p.i)
		}
		todo = nil
		for _, id := range order {
			r := byConfig[id]
			var patterns []string
			for _, j := range r.need {
				patterns = append(patterns, j.dir)
			}
			pkgs, err := packages.Load(&packages.Config{
				Context:    g.ctx,
				Mode:       loadMode,
				Dir:        g.cfg.Dir,
				Env:        r.c.env(g.cfg.Env),
				BuildFlags: r.c.buildFlags(),
				Fset:       token.NewFileSet(),
			}, patterns...)
			for k, j := range r.need {
				i := r.idx[k]
				j.pkgs[i], j.errs[i] = nil, errorCollector{}
				if err != nil {
					j.errs[i].push(&annotations.Error{Pos: token.Position{Filename: j.dir}, Msg: fmt.Sprintf("loading with %s: %v", r.c, err)})
				}
				for _, p := range pkgs {
					if p.Dir == j.dir || (len(p.GoFiles) > 0 && filepath.Dir(p.GoFiles[0]) == j.dir) {
						j.pkgs[i] = p
					}
				}
				if j.pkgs[i] == nil && err == nil {
					j.errs[i].push(&annotations.Error{Pos: token.Position{Filename: j.dir}, Msg: "not loaded with " + r.c.String()})
				}
				if j.pkgs[i] != nil {
					j.errs[i].load(j.pkgs[i], g.wd)
				}
				s := &j.sets[i]
				if len(j.errs[i].list) == 0 {
					continue
				}
				if _, ok := first[pending{j, i}]; !ok {
					first[pending{j, i}] = failure{s.config, j.errs[i]}
				}
				if len(s.alts) > 0 {
					s.config, s.alts = s.alts[0], s.alts[1:]
					todo = append(todo, pending{j, i})
				} else {
					f := first[pending{j, i}]
					s.config, j.errs[i] = f.c, f.errs
				}
			}
		}
	}
}

// constrained returns the files of a package with build constraints: the
// annotated methods of each configuration, resolved where they exist, and
// one generated file per constraint, each checked against every
// configuration that compiles it.
func (g *generator) constrained(j *job) []File {
	failed := len(g.errs.list) // errors of other packages
	models := make([]*annotations.Package, len(j.sets))
	ok := make([]bool, len(j.sets))
	var first *packages.Package
	for i, p := range j.pkgs {
		if p == nil || len(j.errs[i].list) > 0 {
			continue
		}
		model, err := annotations.ResolvePackage(p.Fset, p.Syntax, p.Types, p.TypesInfo)
		if err != nil {
			g.errs.add(p, err)
			continue
		}
		models[i], ok[i] = model, true
		if first == nil {
			first = p
		}
	}
	if len(g.errs.list) > failed {
		return nil
	}
	// Every annotated file must be compiled in a configuration that loads.
	primary := map[string]int{}
	for _, f := range j.d.files {
		if !f.annotation.IsValid() {
			continue
		}
		if _, done := primary[f.key]; done {
			continue
		}
		primary[f.key] = -1
		broken := -1
		for i, s := range j.sets {
			if s.includes(j.d, f.key) {
				if ok[i] {
					primary[f.key] = i
					break
				}
				if broken < 0 {
					broken = i
				}
			}
		}
		switch {
		case primary[f.key] >= 0:
		case broken >= 0:
			for _, e := range j.errs[broken].list {
				g.errs.push(&annotations.Error{Pos: e.Pos, Msg: e.Msg + " (with " + j.sets[broken].label() + ")"})
			}
		default:
			g.errs.push(&annotations.Error{Pos: f.annotation, Msg: fmt.Sprintf(
				"this file is compiled only where //go:build %s holds, and no build configuration idemgen tries "+
					"(every GOOS/GOARCH, every combination of the tags the package's files mention, cgo as the environment sets it) "+
					"satisfies it, so its annotations would never be generated: change the constraint, "+
					"or run idemgen where it holds (-tags for tags it cannot guess, CGO_ENABLED=1 for cgo)", f.key)})
		}
	}
	if len(g.errs.list) > failed {
		return nil
	}
	if first == nil {
		// No configuration loads, and no file has annotations (else an
		// error was reported above): remove stale files.
		return g.outputFiles(j.dir, j.pkgPath, j.d, nil)
	}
	primaryOf := func(key string) int {
		if i, done := primary[key]; done {
			return i
		}
		primary[key] = -1
		for i, s := range j.sets {
			if ok[i] && s.includes(j.d, key) {
				primary[key] = i
				break
			}
		}
		return primary[key]
	}
	merged := mergeModels(j, models, primaryOf)
	if merged == nil {
		return g.outputFiles(j.dir, first.PkgPath, j.d, nil)
	}
	g.models = append(g.models, merged)
	outs, err := templates.RenderFiles(merged)
	if err != nil {
		g.errs.add(first, err)
		return nil
	}
	// The same files, rendered from each other configuration's view of the
	// methods it compiles, must be the same bytes.
	for x, s := range j.sets {
		if !ok[x] {
			continue
		}
		variant := mergeModels(j, models, func(key string) int {
			if s.includes(j.d, key) {
				return x
			}
			return primaryOf(key)
		})
		vouts, err := templates.RenderFiles(variant)
		if err != nil {
			g.errs.add(first, err)
			return nil
		}
		for _, o := range outs {
			if !s.includes(j.d, o.Constraint) {
				continue
			}
			if i := slices.IndexFunc(vouts, func(v templates.Output) bool {
				return v.Constraint == o.Constraint && bytes.Equal(v.Content, o.Content)
			}); i < 0 {
				g.errs.push(differs(merged, o, vouts, j.sets[max(primaryOf(o.Constraint), 0)].label(), s.label()))
				break
			}
		}
	}
	if len(g.errs.list) > failed {
		return nil
	}
	return g.outputFiles(j.dir, first.PkgPath, j.d, outs)
}

// mergeModels joins the models of a package's configurations into one:
// each type and method is taken from the configuration from(key) of its
// file's constraint key, or the first that has it, and carries that key.
// Types and methods are in source order.
func mergeModels(j *job, models []*annotations.Package, from func(key string) int) *annotations.Package {
	var merged *annotations.Package
	types := map[string]*annotations.Type{}
	typeSrc := map[string]int{}
	methods := map[[2]string]*annotations.Method{}
	methodSrc := map[[2]string]int{}
	keyOf := func(p token.Position) string {
		if f := j.d.file(p.Filename); f != nil {
			return f.key
		}
		return ""
	}
	for i, m := range models {
		if m == nil {
			continue
		}
		if merged == nil {
			merged = &annotations.Package{Name: m.Name, Path: m.Path, Dir: m.Dir}
		}
		for _, t := range m.Types {
			tk := keyOf(t.Pos)
			if prev, seen := types[t.Name]; !seen || (typeSrc[t.Name] != from(tk) && i == from(tk)) {
				c := *t
				c.Methods, c.Constraint = nil, tk
				if seen {
					*prev = c
				} else {
					types[t.Name] = &c
				}
				typeSrc[t.Name] = i
			}
			for _, meth := range t.Methods {
				id := [2]string{t.Name, meth.Name + "\x00" + keyOf(meth.Pos)}
				mk := keyOf(meth.Pos)
				if _, seen := methods[id]; !seen || (methodSrc[id] != from(mk) && i == from(mk)) {
					c := *meth
					c.Constraint = mk
					methods[id] = &c
					methodSrc[id] = i
				}
			}
		}
	}
	if merged == nil {
		return nil
	}
	for id, m := range methods {
		t := types[id[0]]
		t.Methods = append(t.Methods, m)
	}
	byPos := func(a, b token.Position) int {
		return cmp.Or(cmp.Compare(a.Filename, b.Filename), cmp.Compare(a.Offset, b.Offset))
	}
	for _, t := range types {
		slices.SortFunc(t.Methods, func(a, b *annotations.Method) int { return byPos(a.Pos, b.Pos) })
		merged.Types = append(merged.Types, t)
	}
	slices.SortFunc(merged.Types, func(a, b *annotations.Type) int { return byPos(a.Pos, b.Pos) })
	return merged
}

// differs is the error for a generated file that comes out differently in
// two configurations that compile it, at the method whose wrapper differs.
func differs(pkg *annotations.Package, want templates.Output, got []templates.Output, a, b string) *annotations.Error {
	var other []byte
	for _, o := range got {
		if o.Constraint == want.Constraint {
			other = o.Content
		}
	}
	wl, ol := strings.Split(string(want.Content), "\n"), strings.Split(string(other), "\n")
	line := 0
	for line < len(wl) && line < len(ol) && wl[line] == ol[line] {
		line++
	}
	var at *annotations.Method
	var atType *annotations.Type
	for _, l := range wl[min(line, len(wl)):] {
		if m := wrapperMethod.FindStringSubmatch(l); m != nil {
			for _, t := range pkg.Types {
				if w, _ := templates.WrapperNames(t.Name); w != m[1] {
					continue
				}
				for _, meth := range t.Methods {
					if meth.Name == m[2] && meth.Constraint == want.Constraint {
						at, atType = meth, t
					}
				}
			}
			break
		}
	}
	if at == nil {
		for _, t := range pkg.Types {
			for _, meth := range t.Methods {
				if at == nil && meth.Constraint == want.Constraint {
					at, atType = meth, t
				}
			}
		}
	}
	if at == nil {
		return &annotations.Error{Pos: token.Position{Filename: pkg.Dir}, Msg: fmt.Sprintf(
			"the generated %s differs between %s and %s", FileNameFor(want.Constraint), a, b)}
	}
	return &annotations.Error{Pos: at.Pos, Msg: fmt.Sprintf(
		"the wrapper of %s.%s differs between build configurations %s and %s (a type it uses is declared differently in each): "+
			"declare %s in files with the build constraints of those declarations, one per configuration, so that each gets its own wrapper",
		atType.Name, at.Name, a, b, at.Name)}
}

// checkOps refuses an operation name that methods of two packages of the
// run both use: one executor would answer each with the other's stored
// outcomes (the executor refuses it too, but only at run time). The error
// is at the later op, by file and offset, and names the first one's
// position. Within a package the resolver checks; the same method compiled
// in several build configurations is one op.
func (g *generator) checkOps() {
	type use struct {
		pkg *annotations.Package
		t   *annotations.Type
		m   *annotations.Method
	}
	var all []use
	for _, p := range g.models {
		for _, t := range p.Types {
			for _, m := range t.Methods {
				all = append(all, use{p, t, m})
			}
		}
	}
	slices.SortStableFunc(all, func(a, b use) int {
		return cmp.Or(cmp.Compare(a.m.OpPos.Filename, b.m.OpPos.Filename), cmp.Compare(a.m.OpPos.Offset, b.m.OpPos.Offset))
	})
	first := map[string]use{}
	for _, u := range all {
		f, seen := first[u.m.Op]
		if !seen {
			first[u.m.Op] = u
			continue
		}
		if f.pkg.Path == u.pkg.Path {
			continue
		}
		at := f.m.OpPos
		if rel, err := filepath.Rel(g.wd, at.Filename); err == nil && !strings.HasPrefix(rel, "..") {
			at.Filename = rel
		}
		g.errs.push(&annotations.Error{Pos: u.m.OpPos, Msg: fmt.Sprintf(
			"op %q is already used by %s.%s of package %s at %s: methods under one op share records, so one would be answered "+
				"with the other's stored outcomes; give one of them another op=", u.m.Op, f.t.Name, f.m.Name, f.pkg.Path, at)})
	}
}

// wrapperMethod matches the first line of a generated wrapper method.
var wrapperMethod = regexp.MustCompile(`^func \(\w+ \*(\w+)\) (\w+)\(`)

// output records the files of a package without build constraints.
func (g *generator) output(pkg *packages.Package, dir string, d *dirFiles, model *annotations.Package) {
	if model == nil {
		g.files = append(g.files, g.outputFiles(dir, pkg.PkgPath, d, nil)...)
		return
	}
	if model.Dir == "" {
		model.Dir = dir
	}
	g.models = append(g.models, model)
	outs, err := templates.RenderFiles(model)
	if err != nil {
		g.errs.add(pkg, err)
		return
	}
	files := g.outputFiles(dir, pkg.PkgPath, d, outs)
	for i := range files {
		if !files[i].Delete && d.generated[files[i].Path] {
			files[i].Warnings = deployEvents(files[i].Path, model)
		}
	}
	g.files = append(g.files, files...)
}

// outputFiles returns the files to write for outs and the deletions of the
// generated files of the directory that outs no longer has. A file of a
// generated name that idemgen did not write is an error.
func (g *generator) outputFiles(dir, pkgPath string, d *dirFiles, outs []templates.Output) []File {
	var files []File
	keep := map[string]bool{}
	for _, o := range outs {
		path := filepath.Join(dir, FileNameFor(o.Constraint))
		keep[path] = true
		if d.foreign[path] {
			g.errs.push(&annotations.Error{Pos: token.Position{Filename: path, Line: 1, Column: 1},
				Msg: filepath.Base(path) + " exists and was not generated by idemgen (its first line is not \"" +
					templates.Header + "\"): rename it, idemgen writes its wrappers there"})
			continue
		}
		files = append(files, File{Path: path, PkgPath: pkgPath, Content: o.Content})
	}
	for _, path := range slices.Sorted(maps.Keys(d.generated)) {
		if !keep[path] {
			files = append(files, File{Path: path, PkgPath: pkgPath, Delete: true})
		}
	}
	return files
}

// testFileAnnotations reports every //idem: line in a _test.go file of
// dir. idemgen wraps a package's non-test files only (the
// wrapper lives in idem_gen.go, which the package's tests see too), so such
// a line would silently do nothing.
func testFileAnnotations(fset *token.FileSet, dir string) annotations.ErrorList {
	names, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	var list annotations.ErrorList
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil || !bytes.Contains(src, []byte("//idem:")) {
			continue
		}
		// A file with a syntax error still yields the comments read so
		// far; go test reports the error itself.
		f, _ := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
		if f == nil {
			continue
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				if annotations.IsDirective(c.Text) {
					list = append(list, &annotations.Error{Pos: fset.Position(c.Pos()), Msg: "//idem: in a _test.go file: idemgen wraps " +
						"the package's non-test files only, so this annotation would do nothing; move the annotated method " +
						"(and its type) to a non-test file, or make the line a plain comment"})
				}
			}
		}
	}
	return list
}

// IsGenerated reports whether content starts with idemgen's header line.
func IsGenerated(content []byte) bool {
	line, _, _ := bytes.Cut(content, []byte("\n"))
	return string(bytes.TrimRight(line, "\r")) == templates.Header
}

// errorCollector gathers every error of every package, with positions
// (google/wire's errorCollector).
type errorCollector struct {
	list annotations.ErrorList
	seen map[string]bool
}

func (c *errorCollector) push(e *annotations.Error) {
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	if s := e.Error(); !c.seen[s] {
		c.seen[s] = true
		c.list = append(c.list, e)
	}
}

// add records err, which Resolve or the templates returned for pkg.
func (c *errorCollector) add(pkg *packages.Package, err error) {
	var list annotations.ErrorList
	var one *annotations.Error
	switch {
	case errors.As(err, &list):
		for _, e := range list {
			c.push(e)
		}
	case errors.As(err, &one):
		c.push(one)
	default:
		c.push(&annotations.Error{Pos: token.Position{Filename: pkg.PkgPath}, Msg: err.Error()})
	}
}

// load records the errors go/packages reported for pkg and reports whether
// there were any. A type error that only says a name idemgen generates is
// undefined is expected (the generated file is left out while loading) and
// dropped. go list -export also compiles the package and reports the
// compiler's output as one error; it repeats the type errors, so it is used
// only when there are none, split into one error per line. dir is the
// directory the go command ran in, which the compiler's paths are relative to.
func (c *errorCollector) load(pkg *packages.Package, dir string) bool {
	// A syntax error makes every later error of the package a guess (a
	// type error about the broken declaration, names it should have
	// declared, the parser's own follow-on errors): report the first
	// syntax error of each file, and nothing else.
	syntaxFiles := map[string]bool{}
	for _, e := range pkg.Errors {
		if e.Kind != packages.ParseError {
			continue
		}
		pos := parsePos(e.Pos)
		if syntaxFiles[pos.Filename] {
			continue
		}
		syntaxFiles[pos.Filename] = true
		if pos.Filename == "" {
			pos.Filename = pkg.PkgPath
		}
		c.push(&annotations.Error{Pos: pos, Msg: "syntax error: " + e.Msg})
	}
	if len(syntaxFiles) > 0 {
		return true
	}
	typeErrors := false
	for _, e := range pkg.Errors {
		typeErrors = typeErrors || e.Kind == packages.TypeError
	}
	failed := false
	for _, e := range pkg.Errors {
		if compiler, ok := strings.CutPrefix(e.Msg, "# "+pkg.PkgPath+"\n"); ok && e.Pos == "" {
			if typeErrors {
				continue
			}
			for _, line := range strings.Split(strings.TrimSpace(compiler), "\n") {
				if undefinedGenerated.MatchString(line) {
					continue
				}
				failed = true
				pos, msg := splitPos(line)
				if pos.Filename != "" && !filepath.IsAbs(pos.Filename) {
					pos.Filename = filepath.Join(dir, pos.Filename)
				}
				if pos.Filename == "" {
					pos.Filename = pkg.PkgPath
				}
				c.push(&annotations.Error{Pos: pos, Msg: msg})
			}
			continue
		}
		if undefinedGenerated.MatchString(e.Msg) {
			continue
		}
		failed = true
		pos := parsePos(e.Pos)
		if pos.Filename == "" {
			pos.Filename = pkg.PkgPath
		}
		c.push(&annotations.Error{Pos: pos, Msg: e.Msg})
	}
	return failed
}

// splitPos splits the compiler's "file:line:col: message".
func splitPos(line string) (token.Position, string) {
	if m := compilerLine.FindStringSubmatch(line); m != nil {
		return parsePos(m[1]), m[2]
	}
	return token.Position{}, line
}

var compilerLine = regexp.MustCompile(`^(\S+?:\d+(?::\d+)?): (.*)$`)

// undefinedGenerated matches the type error of a reference to a wrapper or
// constructor idemgen generates: undefined: NewIdempotentOrderService, or
// undefined: orders.IdempotentOrderService.
// Identifiers are Unicode: undefined: NewIdempotentÜberweisung.
var undefinedGenerated = regexp.MustCompile(`^(?:\S+:\d+:\d+: )?undefined: (?:[\pL_][\pL\pN_]*\.)?(?:[Nn]ewIdempotent|[Ii]dempotent)[\pL\pN_]*$`)

// parsePos parses go/packages' "file:line:col", "file:line", "" or "-".
func parsePos(s string) token.Position {
	var pos token.Position
	if s == "" || s == "-" {
		return pos
	}
	rest := s
	var nums []int
	for range 2 {
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			break
		}
		n, err := strconv.Atoi(rest[i+1:])
		if err != nil {
			break
		}
		nums = append([]int{n}, nums...)
		rest = rest[:i]
	}
	pos.Filename = rest
	if len(nums) > 0 {
		pos.Line = nums[0]
	}
	if len(nums) > 1 {
		pos.Column = nums[1]
	}
	return pos
}
