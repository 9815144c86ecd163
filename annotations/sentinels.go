package annotations

import (
	"go/ast"
	"go/build/constraint"
	"go/types"
	"path/filepath"
	"strings"
)

// sentinels returns the exported package-level error variables of the
// package that final does not list, in name order: a Final error that
// matches one is stored under its name, so that its replay is
// errors.Is-equal to it. A variable declared in a file with a build
// constraint (a //go:build line, or a _GOOS/_GOARCH file name) or in a test
// file is left out: the generated file, which builds in every
// configuration, could not refer to it.
func (r *resolver) sentinels(final []FinalRef) []FinalRef {
	listed := map[*types.Var]bool{}
	for _, f := range final {
		listed[f.Var] = true
	}
	var out []FinalRef
	for _, v := range r.packageErrors() {
		if !listed[v] {
			out = append(out, FinalRef{Name: v.Name(), Var: v})
		}
	}
	return out
}

// packageErrors returns the package's exported error variables declared
// in files without build constraints, in name order, listed once per
// package (every method's sentinels come from them).
func (r *resolver) packageErrors() []*types.Var {
	if r.errorVarsDone {
		return r.errorVars
	}
	r.errorVarsDone = true
	errIface := errorType.Underlying().(*types.Interface)
	scope := r.pkg.Scope()
	for _, name := range scope.Names() {
		v, ok := scope.Lookup(name).(*types.Var)
		if ok && v.Exported() && types.Implements(v.Type(), errIface) && !r.constrained(v) {
			r.errorVars = append(r.errorVars, v)
		}
	}
	return r.errorVars
}

// constrained reports whether obj is declared in a file that does not build
// in every configuration.
func (r *resolver) constrained(obj types.Object) bool {
	name := r.fset.Position(obj.Pos()).Filename
	if strings.HasSuffix(name, "_test.go") || constrainedName(filepath.Base(name)) {
		return true
	}
	for _, f := range r.files {
		if r.fset.Position(f.Package).Filename != name {
			continue
		}
		return hasBuildLine(f)
	}
	return true // not among the files: cannot tell
}

// hasBuildLine reports whether f has a //go:build (or // +build) line
// before its package clause.
func hasBuildLine(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() >= f.Package {
			break
		}
		for _, c := range g.List {
			if constraint.IsGoBuild(c.Text) || constraint.IsPlusBuild(c.Text) {
				return true
			}
		}
	}
	return false
}

// constrainedName reports whether a file name carries an implicit build
// constraint: name_GOOS.go, name_GOARCH.go, name_GOOS_GOARCH.go (also with
// _test), as go/build reads them.
func constrainedName(base string) bool {
	stem := strings.TrimSuffix(strings.TrimSuffix(base, ".go"), "_test")
	parts := strings.Split(stem, "_")
	if len(parts) < 2 {
		return false
	}
	last := parts[len(parts)-1]
	return knownOS[last] || knownArch[last]
}

// The GOOS and GOARCH values go/build recognises in file names.
var (
	knownOS   = setOf("aix android darwin dragonfly freebsd hurd illumos ios js linux nacl netbsd openbsd plan9 solaris wasip1 windows zos")
	knownArch = setOf("386 amd64 amd64p32 arm armbe arm64 arm64be loong64 mips mipsle mips64 mips64le mips64p32 mips64p32le " +
		"ppc ppc64 ppc64le riscv riscv64 s390 s390x sparc sparc64 wasm")
)

func setOf(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}
