package annotations

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"math"
	"strconv"
	"strings"
	"time"
)

// directive is the prefix of every annotation line.
const directive = "//idem:"

// IsDirective reports whether a comment's text is an //idem: line.
func IsDirective(text string) bool { return strings.HasPrefix(text, directive) }

// errs collects errors at token positions.
type errs struct {
	fset *token.FileSet
	list ErrorList
}

func (e *errs) add(pos token.Pos, format string, args ...any) {
	e.list = append(e.list, &Error{Pos: e.fset.Position(pos), Msg: fmt.Sprintf(format, args...)})
}

func (e *errs) err() error {
	if len(e.list) == 0 {
		return nil
	}
	e.list.Sort()
	return e.list
}

// Parse parses the //idem: lines of doc (a doc comment) into one Spec; other
// lines are ignored. It returns (nil, nil) when doc holds no //idem: line, and
// otherwise the Spec and, when something is wrong, an ErrorList with every
// mistake at its column inside the comment (every mistake of every line,
// not the first). The Spec is returned even with errors, holding the
// options that parsed (of a key, or a hash or final list, the operands or
// names that parsed), so callers can report more.
//
// Parse checks syntax only: whether an option is known, written once and
// well formed, and whether a key has the shape of a key. It does not know
// whether doc belongs to a method or a type; a Spec's Defaults is set from
// its first line, and mixing "//idem:defaults" and method lines in one doc
// comment is an error. Whether required options (key, ttl) are present is
// checked by ResolvePackage, after a type's defaults are merged in.
func Parse(fset *token.FileSet, doc *ast.CommentGroup) (*Spec, error) {
	spec, _, err := parse(fset, doc)
	return spec, err
}

// parse is Parse, also returning the options whose mistakes it reported
// (see failedSet), so that the resolver can resolve what did parse without
// reporting what only follows from those mistakes.
func parse(fset *token.FileSet, doc *ast.CommentGroup) (*Spec, failedSet, error) {
	if doc == nil {
		return nil, nil, nil
	}
	p := &lineParser{errs: errs{fset: fset}}
	for _, c := range doc.List {
		if !IsDirective(c.Text) {
			continue
		}
		p.line(c)
	}
	if p.spec == nil {
		return nil, nil, nil
	}
	return p.spec, p.failed, p.err()
}

// failedSet names the options of a Spec that were written but did not
// parse (or parsed only in part: a key or a hash or final list keeps the
// operands and names that parsed). The name "*" stands for every option: a
// line cut short (an unterminated string literal) or left out (method
// options mixed with //idem:defaults) may have held any of them. A
// misspelled option with a suggestion counts as the suggested one.
type failedSet map[string]bool

// has reports whether option name failed, or a line was cut.
func (f failedSet) has(name string) bool { return f[name] || f["*"] }

// union returns the options failed in f or g.
func (f failedSet) union(g failedSet) failedSet {
	if len(g) == 0 {
		return f
	}
	u := failedSet{}
	for n := range f {
		u[n] = true
	}
	for n := range g {
		u[n] = true
	}
	return u
}

type lineParser struct {
	errs
	spec   *Spec
	failed failedSet
}

// fail records that option name (or "*", every option) was written but
// did not parse.
func (p *lineParser) fail(name string) {
	if name == "" {
		return
	}
	if p.failed == nil {
		p.failed = failedSet{}
	}
	p.failed[name] = true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// line parses one //idem: comment into p.spec.
func (p *lineParser) line(c *ast.Comment) {
	text := c.Text
	pos := func(off int) token.Pos { return c.Slash + token.Pos(off) }
	i := len(directive)
	defaults := false
	if rest := text[i:]; strings.HasPrefix(rest, "defaults") && (len(rest) == len("defaults") || isSpace(rest[len("defaults")])) {
		defaults = true
		i += len("defaults")
	}
	if p.spec == nil {
		p.spec = &Spec{Defaults: defaults, Pos: c.Slash}
	} else if defaults != p.spec.Defaults {
		if defaults {
			p.add(pos(len(directive)), "//idem:defaults mixed with method options in one doc comment: defaults go on a type, the others on a method")
		} else {
			p.add(pos(len(directive)), "method options mixed with //idem:defaults in one doc comment: defaults go on a type, the others on a method")
		}
		p.fail("*")
		return
	}
	n := 0
	prevPlus := false
	for {
		for i < len(text) && isSpace(text[i]) {
			i++
		}
		if i >= len(text) || strings.HasPrefix(text[i:], "//") {
			break
		}
		start := i
		var ok bool
		i, ok = p.scanToken(c, i)
		n++
		if !ok {
			p.fail("*")
			break
		}
		tok := text[start:i]
		eq := strings.IndexByte(tok, '=')
		if eq < 0 {
			switch {
			case tok == "defaults":
				p.add(pos(start), "defaults must come first: //idem:defaults <options>, on a type's doc comment")
			case isOption(tok):
				p.add(pos(start), "option %q needs a value: %s=...", tok, tok)
				p.fail(tok)
			case prevPlus || strings.HasPrefix(tok, "+"):
				p.add(pos(start), "unexpected %q: a key has no spaces outside string literals", tok)
				p.fail("key")
			case token.IsIdentifier(tok):
				p.unknown(pos(start), tok)
			default:
				p.add(pos(start), "unexpected %q: options are name=value, separated by spaces", tok)
			}
			prevPlus = strings.HasSuffix(tok, "+")
			continue
		}
		name, val := tok[:eq], tok[eq+1:]
		prevPlus = name == "key" && strings.HasSuffix(val, "+")
		o := Opt{NamePos: pos(start), ValuePos: pos(start + eq + 1), Text: val}
		switch {
		case name == "":
			p.add(pos(start), "missing option name before '='")
			continue
		case name == "defaults":
			p.add(pos(start), "defaults is not an option: write //idem:defaults <options>, on a type's doc comment")
			continue
		case !isOption(name):
			p.unknown(pos(start), name)
			continue
		}
		if prev := p.spec.opt(name); prev != nil {
			pp := p.fset.Position(prev.NamePos)
			p.add(o.NamePos, "repeated option %q (first at %d:%d)", name, pp.Line, pp.Column)
			continue
		}
		if val == "" {
			p.add(o.ValuePos, "option %s has an empty value", name)
			p.fail(name)
			continue
		}
		p.option(name, o)
	}
	if n == 0 {
		if defaults {
			p.add(c.Slash, "//idem:defaults without options")
		} else {
			p.add(c.Slash, "empty //idem: line: write //idem:key=... ttl=...")
		}
	}
}

// scanToken returns the end of the token starting at i: the next space or
// tab outside a string literal, or the end of the text; false after an
// unterminated literal (reported).
func (p *lineParser) scanToken(c *ast.Comment, i int) (int, bool) {
	text := c.Text
	for i < len(text) && !isSpace(text[i]) {
		switch text[i] {
		case '"':
			j := i + 1
			for j < len(text) && text[j] != '"' {
				if text[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(text) {
				p.add(c.Slash+token.Pos(i), "string literal not terminated")
				return len(text), false
			}
			i = j + 1
		case '`':
			j := strings.IndexByte(text[i+1:], '`')
			if j < 0 {
				p.add(c.Slash+token.Pos(i), "raw string literal not terminated")
				return len(text), false
			}
			i += j + 2
		default:
			i++
		}
	}
	return i, true
}

// unknown reports an unknown option, suggesting the nearest known one.
func (p *lineParser) unknown(pos token.Pos, name string) {
	if best := nearest(name, optionNames); best != "" {
		p.add(pos, "unknown option %q; did you mean %q?", name, best)
		p.fail(best)
		return
	}
	p.add(pos, "unknown option %q; options are %s", name, strings.Join(optionNames, ", "))
}

// nearest is idemgen's one "did you mean" rule: the candidate nearest to
// name (by editDistance, the first on a tie) when it is within half the
// length of the shorter of the two (at least 1) and differs from name;
// otherwise "".
func nearest(name string, candidates []string) string {
	best, bestD := "", math.MaxInt
	for _, c := range candidates {
		if c == name {
			continue
		}
		if d := editDistance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > max(1, min(len(name), len(best))/2) {
		return ""
	}
	return best
}

// editDistance is the Damerau-Levenshtein (optimal string alignment)
// distance between a and b, so a transposition ("tll" → "ttl") costs 1.
func editDistance(a, b string) int {
	if len(a) > 64 {
		return len(a)
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// option parses the value of a known option and stores it in p.spec (what
// of it parsed, for a key or a list), recording it as failed when its value
// has a mistake.
func (p *lineParser) option(name string, o Opt) {
	if opt, ok := lookupOption(name); ok {
		n := len(p.list)
		opt.parse(p, name, o)
		if len(p.list) > n {
			p.fail(name)
		}
	}
}

// keyOption parses key=.
func (p *lineParser) keyOption(_ string, o Opt) {
	if k := p.key(o); k != nil {
		p.spec.Key = k
	}
}

// durationOption returns the parser of a duration option stored in the
// field field returns; nonZero refuses 0.
func durationOption(nonZero bool, field func(*Spec) **Duration) func(*lineParser, string, Opt) {
	return func(p *lineParser, name string, o Opt) {
		if d, ok := p.duration(o.ValuePos, name, o.Text, nonZero); ok {
			*field(p.spec) = &Duration{Opt: o, D: d}
		}
	}
}

// retriesOption parses retries=.
func (p *lineParser) retriesOption(_ string, o Opt) {
	if !allDigits(o.Text) {
		p.add(o.ValuePos, "malformed retries=%s: want a whole number like 3", o.Text)
		return
	}
	n, err := strconv.Atoi(o.Text)
	if err != nil || n > maxRetries {
		p.add(o.ValuePos, "retries=%s is too large (at most %d)", o.Text, maxRetries)
		return
	}
	p.spec.Retries = &Int{Opt: o, N: n}
}

// inflightOption parses inflight=.
func (p *lineParser) inflightOption(_ string, o Opt) {
	switch {
	case o.Text == "reject":
		p.spec.Inflight = &Inflight{Opt: o}
	case o.Text == "wait":
		p.add(o.ValuePos, "inflight=wait needs a duration: inflight=wait:3s")
	case strings.HasPrefix(o.Text, "wait:"):
		if d, ok := p.duration(o.ValuePos+5, "inflight wait", o.Text[5:], true); ok {
			p.spec.Inflight = &Inflight{Opt: o, Wait: true, D: d}
		}
	default:
		p.add(o.ValuePos, "malformed inflight=%s: want reject or wait:<duration>", o.Text)
	}
}

// hashOption parses hash=.
func (p *lineParser) hashOption(_ string, o Opt) {
	if o.Text == "none" {
		p.spec.Hash = &NameList{Opt: o, None: true}
		return
	}
	if l := p.names(o, ",", false); len(l.Names) > 0 {
		p.spec.Hash = l
	}
}

// finalOption parses final=.
func (p *lineParser) finalOption(_ string, o Opt) {
	if l := p.names(o, "|", true); len(l.Names) > 0 {
		p.spec.Final = l
	}
}

// opOption parses op=.
func (p *lineParser) opOption(_ string, o Opt) {
	for i, r := range o.Text {
		if !isOpRune(r) {
			p.add(o.ValuePos+token.Pos(i), "malformed op=%s: %q is not allowed (use letters, digits and _ . - / :)", o.Text, r)
			return
		}
	}
	p.spec.Op = &Op{Opt: o}
}

// codecOption parses codec=.
func (p *lineParser) codecOption(_ string, o Opt) {
	if o.Text != "json" && o.Text != "custom" {
		p.add(o.ValuePos, "malformed codec=%s: want json (the default, checked by idemgen) or custom (a codec set with idem.WithCodec)", o.Text)
		return
	}
	p.spec.Codec = &Codec{Opt: o, Custom: o.Text == "custom"}
}

// renewOption parses renew=.
func (p *lineParser) renewOption(_ string, o Opt) {
	if o.Text != "true" && o.Text != "false" {
		p.add(o.ValuePos, "malformed renew=%s: want true (renew the lease while the method runs) or false", o.Text)
		return
	}
	p.spec.Renew = &Bool{Opt: o, B: o.Text == "true"}
}

// maxRetries bounds retries so the budget arithmetic stays sane.
const maxRetries = 1_000_000

func isOpRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' ||
		r == '_' || r == '.' || r == '-' || r == '/' || r == ':'
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// names parses a sep-separated list of identifiers (qualified ones too when
// qual is set), reporting empty elements and duplicates; the list holds
// the names that parsed.
func (p *lineParser) names(o Opt, sep string, qual bool) *NameList {
	l := &NameList{Opt: o}
	seen := map[string]bool{}
	off := 0
	for _, el := range strings.Split(o.Text, sep) {
		pos := o.ValuePos + token.Pos(off)
		off += len(el) + len(sep)
		n := Name{Name: el, Pos: pos}
		if q, rest, found := strings.Cut(el, "."); found && qual {
			n.Qual, n.Name = q, rest
		}
		switch {
		case el == "":
			p.add(pos, "empty name in %s=%s", optName(sep), o.Text)
			continue
		case el == "_" || !token.IsIdentifier(n.Name) || n.Qual != "" && !token.IsIdentifier(n.Qual):
			if qual {
				p.add(pos, "malformed name %q in final: want ErrName or pkg.ErrName", el)
			} else if el == "none" {
				p.add(pos, "hash=none cannot be combined with parameter names")
			} else {
				p.add(pos, "malformed parameter name %q in hash", el)
			}
			continue
		case el == "none" && !qual:
			p.add(pos, "hash=none cannot be combined with parameter names")
			continue
		case seen[el]:
			p.add(pos, "%s lists %q twice", optName(sep), el)
			continue
		}
		seen[el] = true
		l.Names = append(l.Names, n)
	}
	return l
}

func optName(sep string) string {
	if sep == "|" {
		return "final"
	}
	return "hash"
}

// duration parses a Go duration with an optional leading number of days.
// positive requires it to be > 0.
func (p *lineParser) duration(pos token.Pos, name, s string, positive bool) (time.Duration, bool) {
	d, ok := parseDuration(s)
	if !ok && tooLarge(s) {
		const day = 24 * time.Hour
		p.add(pos, "duration %s=%s exceeds the maximum a duration can hold, about %s (292 years)", name, s, FormatDuration(math.MaxInt64/day*day))
		return 0, false
	}
	if !ok {
		p.add(pos, "malformed duration %s=%s: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h", name, s)
		return 0, false
	}
	if positive && d <= 0 {
		p.add(pos, "%s must be positive, not %s", name, s)
		return 0, false
	}
	return d, true
}

// tooLarge reports whether s is a well-formed duration too large for a
// time.Duration: with every run of digits made 1, it parses.
func tooLarge(s string) bool {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			if i == 0 || s[i-1] < '0' || s[i-1] > '9' {
				b.WriteByte('1')
			}
			continue
		}
		b.WriteByte(s[i])
	}
	_, ok := parseDuration(b.String())
	return ok
}

// parseDuration parses a Go duration with no sign, optionally preceded by a
// whole number of days: "500ms", "7d", "1d12h".
func parseDuration(s string) (time.Duration, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		if !allDigits(s[:i]) {
			return 0, false
		}
		n, err := strconv.ParseInt(s[:i], 10, 64)
		const day = 24 * time.Hour
		if err != nil || n > int64(math.MaxInt64/day) {
			return 0, false
		}
		days = time.Duration(n) * day
		s = s[i+1:]
		if s == "" {
			return days, true
		}
		if s[0] < '0' || s[0] > '9' {
			return 0, false
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d > math.MaxInt64-days {
		return 0, false
	}
	return days + d, true
}

// key parses a key value as a Go expression and checks its shape.
func (p *lineParser) key(o Opt) *KeyExpr {
	kf := token.NewFileSet()
	e, err := parser.ParseExprFrom(kf, "", o.Text, 0)
	if err != nil {
		off := 0
		msg := err.Error()
		if l := (scanner.ErrorList)(nil); errors.As(err, &l) && len(l) > 0 {
			off, msg = l[0].Pos.Offset, l[0].Msg
		}
		p.add(o.ValuePos+token.Pos(min(max(off, 0), len(o.Text))), "malformed key: %s", msg)
		return nil
	}
	offset := func(pos token.Pos) int { return kf.Position(pos).Offset }
	if start, end := offset(e.Pos()), offset(e.End()); start != 0 || end != len(o.Text) {
		at := end
		if start != 0 {
			at = 0
		}
		p.add(o.ValuePos+token.Pos(at), "malformed key: unexpected text %q", o.Text[at:])
		return nil
	}
	k := &KeyExpr{Opt: o}
	var walk func(e ast.Expr)
	walk = func(e ast.Expr) {
		if b, isBin := e.(*ast.BinaryExpr); isBin {
			if b.Op != token.ADD {
				p.add(o.ValuePos+token.Pos(offset(b.OpPos)), "%s in a key: key parts are joined by +", b.Op)
				return
			}
			walk(b.X)
			walk(b.Y)
			return
		}
		start := offset(e.Pos())
		op := Operand{Pos: o.ValuePos + token.Pos(start), Text: o.Text[start:offset(e.End())]}
		if lit, isLit := e.(*ast.BasicLit); isLit {
			if lit.Kind != token.STRING {
				p.add(op.Pos, "%s in a key: only string literals are allowed (write %q)", lit.Value, lit.Value)
				return
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				p.add(op.Pos, "malformed string literal %s", lit.Value)
				return
			}
			if v == "" {
				p.add(op.Pos, "empty string literal in a key")
				return
			}
			op.Literal, op.Value = true, v
			k.Operands = append(k.Operands, op)
			return
		}
		path, bad := p.path(e, o.ValuePos, offset)
		if bad {
			return
		}
		op.Path = path
		k.Operands = append(k.Operands, op)
	}
	walk(e)
	if len(k.Operands) == 0 {
		return nil
	}
	return k
}

// path flattens a selector/call chain rooted at an identifier.
func (p *lineParser) path(e ast.Expr, base token.Pos, offset func(token.Pos) int) ([]Selector, bool) {
	at := func(pos token.Pos) token.Pos { return base + token.Pos(offset(pos)) }
	switch e := e.(type) {
	case *ast.Ident:
		if e.Name == "_" {
			p.add(at(e.Pos()), "_ in a key: name a parameter")
			return nil, true
		}
		return []Selector{{Name: e.Name, Pos: at(e.Pos())}}, false
	case *ast.SelectorExpr:
		path, bad := p.path(e.X, base, offset)
		if bad {
			return nil, true
		}
		return append(path, Selector{Name: e.Sel.Name, Pos: at(e.Sel.Pos())}), false
	case *ast.CallExpr:
		sel, isSel := e.Fun.(*ast.SelectorExpr)
		if !isSel {
			p.add(at(e.Pos()), "a call in a key must be a method of a parameter path, like req.Key()")
			return nil, true
		}
		if len(e.Args) > 0 || e.Ellipsis.IsValid() {
			p.add(at(e.Lparen), "method %s in a key is called with arguments: only methods without arguments are allowed", sel.Sel.Name)
			return nil, true
		}
		path, bad := p.path(sel, base, offset)
		if bad {
			return nil, true
		}
		path[len(path)-1].Call = true
		return path, false
	}
	p.add(at(e.Pos()), "%s in a key: key parts are parameter paths (req.ID, msg.Key()), string literals, op and tenant, joined by +", describe(e))
	return nil, true
}

// describe names an expression kind for error messages.
func describe(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.ParenExpr:
		return "parentheses"
	case *ast.IndexExpr, *ast.IndexListExpr:
		return "an index expression"
	case *ast.StarExpr:
		return "a dereference"
	case *ast.UnaryExpr:
		return "unary " + e.Op.String()
	case *ast.SliceExpr:
		return "a slice expression"
	case *ast.TypeAssertExpr:
		return "a type assertion"
	case *ast.CompositeLit:
		return "a composite literal"
	case *ast.FuncLit:
		return "a function literal"
	}
	return "this expression"
}
