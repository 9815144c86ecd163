package generate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"go/build"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/annotations"
	"github.com/idemgen/idemgen/templates"
)

// This file is what idemgen knows of build constraints. The go command
// compiles a package's files in one build configuration (GOOS, GOARCH, cgo,
// tags) at a time, so a package may hold annotated methods that one load
// does not see. idemgen reads every .go file of the package directory,
// groups the annotated ones by their constraint (//go:build line and
// GOOS/GOARCH file-name suffix, as one expression), tells apart the build
// configurations that compile different sets of the package's files, and
// loads one representative of each: every annotated method is resolved where
// it exists, and every generated file is checked against every configuration
// that compiles it.

// goFile is a .go file of a package directory as the go command sees it.
type goFile struct {
	path    string
	pkgName string
	// expr is the file's build constraint (its //go:build expression and
	// its file-name suffix, joined by &&); nil when it has none.
	expr constraint.Expr
	// key is expr.String(), "" for none: files with the same key are
	// compiled in the same configurations, and their generated code goes to
	// the same file.
	key string
	// annotation is the position of the file's first //idem: line; zero
	// when it has none.
	annotation token.Position
}

// dirFiles is what scanDir found in a package directory.
type dirFiles struct {
	files []goFile
	// generated lists the idem_gen.go and idem_gen_*.go files idemgen
	// wrote; foreign the files of those names it did not write.
	generated, foreign map[string]bool
}

// constrained reports whether some file of the directory has a build
// constraint.
func (d *dirFiles) constrained() bool {
	for _, f := range d.files {
		if f.expr != nil {
			return true
		}
	}
	return false
}

func (d *dirFiles) file(path string) *goFile {
	for i := range d.files {
		if d.files[i].path == path {
			return &d.files[i]
		}
	}
	return nil
}

// generatedName matches the names of the files idemgen writes.
var generatedName = regexp.MustCompile(`^idem_gen(?:_[a-z0-9_]+)?\.go$`)

// scanDir reads the package clause and the build constraint of every .go
// file of dir that the go command could compile into the package (not a
// test, not starting with . or _), and lists the generated files. A
// malformed //go:build line is an error at its position.
func scanDir(dir string) (*dirFiles, annotations.ErrorList) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, annotations.ErrorList{{Pos: token.Position{Filename: dir}, Msg: err.Error()}}
	}
	d := &dirFiles{generated: map[string]bool{}, foreign: map[string]bool{}}
	var errs annotations.ErrorList
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") ||
			strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			continue
		}
		path := filepath.Join(dir, name)
		src, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, &annotations.Error{Pos: token.Position{Filename: path}, Msg: err.Error()})
			continue
		}
		if generatedName.MatchString(name) {
			if IsGenerated(src) {
				d.generated[path] = true
				continue
			}
			d.foreign[path] = true
		}
		f, err := parser.ParseFile(fset, path, src, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			continue // the load reports it
		}
		gf := goFile{path: path, pkgName: f.Name.Name}
		for _, cg := range f.Comments {
			if cg.Pos() > f.Package {
				break
			}
			for _, c := range cg.List {
				if !constraint.IsGoBuild(c.Text) || gf.expr != nil {
					continue
				}
				if gf.expr, err = constraint.Parse(c.Text); err != nil {
					errs = append(errs, &annotations.Error{Pos: fset.Position(c.Pos()), Msg: "malformed //go:build line: " + err.Error()})
				}
			}
		}
		and := func(e constraint.Expr) {
			if gf.expr == nil {
				gf.expr = e
			} else {
				gf.expr = &constraint.AndExpr{X: gf.expr, Y: e}
			}
		}
		if suffix := fileNameExpr(name); suffix != nil {
			and(suffix)
		}
		for _, imp := range f.Imports {
			if imp.Path.Value == `"C"` { // cgo files build only with cgo
				and(&constraint.TagExpr{Tag: "cgo"})
				break
			}
		}
		if gf.expr != nil {
			gf.key = gf.expr.String()
		}
		gf.annotation = firstAnnotation(path, src)
		d.files = append(d.files, gf)
	}
	return d, errs
}

// only keeps the files of package name (a directory may also hold, say, a
// //go:build ignore program).
func (d *dirFiles) only(name string) {
	d.files = slices.DeleteFunc(d.files, func(f goFile) bool { return f.pkgName != name })
}

// firstAnnotation returns the position of the first //idem: line of src.
func firstAnnotation(path string, src []byte) token.Position {
	line := 1
	for l := range bytes.Lines(src) {
		if t := bytes.TrimLeft(l, " \t"); bytes.HasPrefix(t, []byte("//idem:")) {
			return token.Position{Filename: path, Line: line, Column: len(l) - len(t) + 1}
		}
		line++
	}
	return token.Position{}
}

// fileNameExpr is the constraint of a file name's GOOS/GOARCH suffix
// (name_GOOS.go, name_GOARCH.go, name_GOOS_GOARCH.go), as go/build reads
// it; nil for none.
func fileNameExpr(name string) constraint.Expr {
	name, _, _ = strings.Cut(name, ".")
	i := strings.IndexByte(name, '_')
	if i < 0 {
		return nil
	}
	l := strings.Split(name[i:], "_")
	if n := len(l); n > 0 && l[n-1] == "test" {
		l = l[:n-1]
	}
	n := len(l)
	switch {
	case n >= 2 && knownOS(l[n-2]) && knownArch(l[n-1]):
		return &constraint.AndExpr{X: &constraint.TagExpr{Tag: l[n-2]}, Y: &constraint.TagExpr{Tag: l[n-1]}}
	case n >= 1 && (knownOS(l[n-1]) || knownArch(l[n-1])):
		return &constraint.TagExpr{Tag: l[n-1]}
	}
	return nil
}

// FileNameFor returns the name of the generated file for the build
// constraint key: idem_gen.go for none, else idem_gen_<words>.go, with
// words spelled from the expression (linux, pro_linux, not_pro,
// linux_or_darwin). A name whose last words would read as a GOOS/GOARCH
// suffix the constraint does not imply gets _build appended, since the go
// command would apply that suffix too.
func FileNameFor(key string) string {
	if key == "" {
		return templates.FileName
	}
	e, err := constraint.Parse("//go:build " + key)
	if err != nil {
		return "idem_gen_" + sanitize(key) + ".go"
	}
	var words []string
	var walk func(e constraint.Expr)
	walk = func(e constraint.Expr) {
		switch e := e.(type) {
		case *constraint.TagExpr:
			words = append(words, sanitize(e.Tag))
		case *constraint.NotExpr:
			words = append(words, "not")
			walk(e.X)
		case *constraint.AndExpr:
			walk(e.X)
			walk(e.Y)
		case *constraint.OrExpr:
			walk(e.X)
			words = append(words, "or")
			walk(e.Y)
		}
	}
	walk(e)
	base := "idem_gen_" + strings.Join(words, "_")
	if implied := fileNameExpr(base + ".go"); implied != nil && !impliedBy(implied, e) {
		base += "_build"
	}
	return base + ".go"
}

// impliedBy reports whether every tag of the suffix constraint s (a tag or
// an && of two) is a top-level conjunct of e.
func impliedBy(s, e constraint.Expr) bool {
	conj := map[string]bool{}
	var and func(e constraint.Expr)
	and = func(e constraint.Expr) {
		switch e := e.(type) {
		case *constraint.AndExpr:
			and(e.X)
			and(e.Y)
		case *constraint.TagExpr:
			conj[e.Tag] = true
		}
	}
	and(e)
	ok := true
	s.Eval(func(tag string) bool {
		ok = ok && conj[tag]
		return true
	})
	return ok
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '_'
	}, s)
}

// config is one build configuration.
type config struct {
	goos, goarch string
	cgo          bool
	tags         []string // besides idemgen, sorted
}

func (c config) String() string {
	s := "GOOS=" + c.goos + " GOARCH=" + c.goarch
	if c.cgo {
		s += " CGO_ENABLED=1"
	} else {
		s += " CGO_ENABLED=0"
	}
	if len(c.tags) > 0 {
		s += " -tags=" + strings.Join(c.tags, ",")
	}
	return s
}

// has reports whether tag is satisfied in c, as go/build's matchTag does.
func (c config) has(tag string) bool {
	switch {
	case tag == c.goos, tag == c.goarch, tag == "gc", tag == templates.BuildTag:
		return true
	case tag == "linux" && c.goos == "android", tag == "darwin" && c.goos == "ios",
		tag == "solaris" && c.goos == "illumos":
		return true
	case tag == "unix":
		return unixOS(c.goos)
	case tag == "cgo":
		return c.cgo
	}
	return slices.Contains(c.tags, tag) || slices.Contains(build.Default.ReleaseTags, tag) ||
		(c.goarch == build.Default.GOARCH && slices.Contains(build.Default.ToolTags, tag))
}

func (c config) match(e constraint.Expr) bool { return e == nil || e.Eval(c.has) }

// env returns base with c's GOOS, GOARCH and CGO_ENABLED.
func (c config) env(base []string) []string {
	if base == nil {
		base = os.Environ()
	}
	cgo := "0"
	if c.cgo {
		cgo = "1"
	}
	return append(slices.Clip(base), "GOOS="+c.goos, "GOARCH="+c.goarch, "CGO_ENABLED="+cgo)
}

func (c config) buildFlags() []string {
	return []string{"-tags=" + strings.Join(append([]string{templates.BuildTag}, c.tags...), ",")}
}

// configSet is a build configuration and the files of a package directory
// it compiles; no two configSets of a directory compile the same files.
type configSet struct {
	config
	files []int // indexes into dirFiles.files
	// alts are other configurations that compile the same files, tried in
	// turn when the package does not build in config.
	alts []config
	// cgo is whether a file of the directory mentions cgo.
	cgo bool
}

// maxAlts bounds the alternative configurations of a configSet.
const maxAlts = 2

// label names the configuration in messages: config.String(), without
// CGO_ENABLED when no file mentions cgo.
func (s *configSet) label() string {
	l := s.config.String()
	if !s.cgo {
		l = strings.Replace(strings.Replace(l, " CGO_ENABLED=1", "", 1), " CGO_ENABLED=0", "", 1)
	}
	return l
}

// includes reports whether the set compiles the files of constraint key.
func (s *configSet) includes(d *dirFiles, key string) bool {
	for _, i := range s.files {
		if d.files[i].key == key {
			return true
		}
	}
	return false
}

// maxVariedTags bounds the tags whose every combination idemgen tries.
const maxVariedTags = 8

// toolchain is what the go command says of the build configurations:
// the current one and every port.
type toolchain struct {
	base  config
	ports []port
}

type port struct {
	GOOS, GOARCH string
	FirstClass   bool
	Broken       bool
}

// loadToolchain asks the go command for the current configuration and the
// list of ports.
func loadToolchain(ctx context.Context, cfg Config) (*toolchain, error) {
	var env struct {
		GOOS, GOARCH string
		CgoEnabled   string `json:"CGO_ENABLED"`
	}
	if err := goJSON(ctx, cfg, &env, "env", "-json", "GOOS", "GOARCH", "CGO_ENABLED"); err != nil {
		return nil, err
	}
	var ports []port
	if err := goJSON(ctx, cfg, &ports, "tool", "dist", "list", "-json"); err != nil {
		return nil, err
	}
	tc := &toolchain{base: config{goos: env.GOOS, goarch: env.GOARCH, cgo: env.CgoEnabled == "1", tags: slices.Sorted(slices.Values(cfg.Tags))}}
	// The current port first, then the first-class ports, then the rest,
	// each by name: the first configuration to compile a file is the one
	// its methods are resolved in.
	for _, p := range ports {
		if !p.Broken {
			tc.ports = append(tc.ports, p)
		}
	}
	rank := func(p port) int {
		switch {
		case p.GOOS == env.GOOS && p.GOARCH == env.GOARCH:
			return 0
		case p.FirstClass:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(tc.ports, func(a, b port) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.GOOS, b.GOOS), cmp.Compare(a.GOARCH, b.GOARCH))
	})
	return tc, nil
}

func goJSON(ctx context.Context, cfg Config, v any, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = cfg.Dir, cfg.Env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("idemgen: go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("idemgen: go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// configSets returns the distinct build configurations of the directory:
// every port, cgo as the environment has it on the current port (and off
// there too when a file mentions cgo), and every combination of the tags the
// files mention besides the ones given with -tags, which are always set. Two
// configurations that compile the same files are one; one whose files do not
// agree on the package name is none. The current configuration (without the
// varied tags) comes first when it compiles any file.
func (tc *toolchain) configSets(d *dirFiles) ([]configSet, error) {
	mentioned := map[string]bool{}
	for _, f := range d.files {
		if f.expr != nil {
			f.expr.Eval(func(tag string) bool { mentioned[tag] = true; return true })
		}
	}
	var varied []string
	for _, tag := range slices.Sorted(maps.Keys(mentioned)) {
		if !knownOS(tag) && !knownArch(tag) && !slices.Contains(tc.base.tags, tag) && !toolTag(tag) &&
			!slices.Contains([]string{"unix", "cgo", "gc", "gccgo", templates.BuildTag}, tag) {
			varied = append(varied, tag)
		}
	}
	if len(varied) > maxVariedTags {
		return nil, fmt.Errorf("the files of the package mention %d build tags (%s): idemgen tries every combination of at most %d; "+
			"give the ones that are always set with -tags", len(varied), strings.Join(varied, ", "), maxVariedTags)
	}
	seen := map[string]int{} // files -> index in sets
	var sets []configSet
	try := func(c config) {
		var files []int
		name := ""
		for i, f := range d.files {
			if !c.match(f.expr) {
				continue
			}
			if name != "" && f.pkgName != name {
				return
			}
			name = f.pkgName
			files = append(files, i)
		}
		id := fmt.Sprint(files)
		if len(files) == 0 {
			return
		}
		if i, ok := seen[id]; ok {
			// Another port, not only another combination of tags.
			if s := &sets[i]; len(s.alts) < maxAlts && c.goos != s.goos && !slices.ContainsFunc(s.alts, func(a config) bool { return a.goos == c.goos }) {
				s.alts = append(s.alts, c)
			}
			return
		}
		seen[id] = len(sets)
		sets = append(sets, configSet{config: c, files: files, cgo: mentioned["cgo"]})
	}
	for _, p := range tc.ports {
		cgos := []bool{false}
		if p.GOOS == tc.base.goos && p.GOARCH == tc.base.goarch {
			cgos = []bool{tc.base.cgo}
			if tc.base.cgo && mentioned["cgo"] {
				cgos = append(cgos, false)
			}
		}
		for _, cgo := range cgos {
			for mask := range 1 << len(varied) {
				tags := slices.Clone(tc.base.tags)
				for i, t := range varied {
					if mask&(1<<i) != 0 {
						tags = append(tags, t)
					}
				}
				slices.Sort(tags)
				try(config{goos: p.GOOS, goarch: p.GOARCH, cgo: cgo, tags: tags})
			}
		}
	}
	return sets, nil
}

// toolTag reports whether tag is a release or tool tag (go1.21,
// goamd64.v3, goexperiment.x), which no configuration idemgen tries
// changes.
func toolTag(tag string) bool {
	if rest, ok := strings.CutPrefix(tag, "go1."); ok {
		_, err := strconv.Atoi(rest)
		return err == nil
	}
	return strings.HasPrefix(tag, "go") && strings.Contains(tag, ".")
}

// The GOOS and GOARCH values go/build knows (internal/syslist): file-name
// suffixes use them, and the "unix" tag means one of the unix ones.
const (
	knownOSList = "aix android darwin dragonfly freebsd hurd illumos ios js linux nacl netbsd openbsd " +
		"plan9 solaris wasip1 windows zos"
	unixOSList    = "aix android darwin dragonfly freebsd hurd illumos ios linux netbsd openbsd solaris"
	knownArchList = "386 amd64 amd64p32 arm armbe arm64 arm64be loong64 mips mipsle mips64 mips64le " +
		"mips64p32 mips64p32le ppc ppc64 ppc64le riscv riscv64 s390 s390x sparc sparc64 wasm"
)

func knownOS(s string) bool   { return inList(knownOSList, s) }
func unixOS(s string) bool    { return inList(unixOSList, s) }
func knownArch(s string) bool { return inList(knownArchList, s) }

func inList(list, s string) bool {
	return s != "" && !strings.ContainsRune(s, ' ') && strings.Contains(" "+list+" ", " "+s+" ")
}
