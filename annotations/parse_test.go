package annotations

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseLines parses the doc comment made of lines (line 3 onwards of a
// file "a.go") above a method.
func parseLines(t testing.TB, lines ...string) (*Spec, error) {
	t.Helper()
	fset := token.NewFileSet()
	text := "package p\n\n" + strings.Join(lines, "\n") + "\nfunc (T) M() {}\n"
	f, err := parser.ParseFile(fset, "a.go", text, parser.ParseComments)
	require.NoError(t, err)
	return Parse(fset, f.Decls[0].(*ast.FuncDecl).Doc)
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		check func(t *testing.T, s *Spec)
		str   string // String(), when not the single input line
	}{
		{
			name:  "readme",
			lines: []string{"//idem:key=order.ID+op ttl=155s"},
			check: func(t *testing.T, s *Spec) {
				require.NotNil(t, s.Key)
				require.Len(t, s.Key.Operands, 2)
				assert.Equal(t, []Selector{{Name: "order", Pos: s.Key.ValuePos}, {Name: "ID", Pos: s.Key.ValuePos + 6}}, s.Key.Operands[0].Path)
				assert.Equal(t, "op", s.Key.Operands[1].Text)
				assert.Equal(t, 155*time.Second, s.TTL.D)
				assert.Equal(t, "155s", s.TTL.Text)
				assert.False(t, s.Defaults)
			},
		},
		{
			name: "multi-line merge and trailing comment",
			lines: []string{
				"// Refund refunds.",
				`//idem:key=req.CustomerID+"refund"+req.RefundNo`,
				"//idem:retries=2 timeout=2s backoff=500ms downstream=120s margin=30s   // ttl derived: 155s",
				"//idem:final=ErrInsufficientFunds|ErrOrderClosed|pay.ErrClosed inflight=wait:3s",
			},
			check: func(t *testing.T, s *Spec) {
				require.Len(t, s.Key.Operands, 3)
				assert.True(t, s.Key.Operands[1].Literal)
				assert.Equal(t, "refund", s.Key.Operands[1].Value)
				assert.Equal(t, 2, s.Retries.N)
				assert.Equal(t, 120*time.Second, s.Downstream.D)
				assert.Equal(t, []Name{{Name: "ErrInsufficientFunds", Pos: s.Final.ValuePos}, {Name: "ErrOrderClosed", Pos: s.Final.ValuePos + 21}, {Qual: "pay", Name: "ErrClosed", Pos: s.Final.ValuePos + 36}}, s.Final.Names)
				assert.Equal(t, "pay.ErrClosed", s.Final.Names[2].String())
				assert.True(t, s.Inflight.Wait)
				assert.Equal(t, 3*time.Second, s.Inflight.D)
			},
			str: `//idem:key=req.CustomerID+"refund"+req.RefundNo retries=2 timeout=2s backoff=500ms downstream=120s margin=30s inflight=wait:3s final=ErrInsufficientFunds|ErrOrderClosed|pay.ErrClosed`,
		},
		{
			name:  "quoted literal with spaces and equals",
			lines: []string{"//idem:key=a.B+\"x = y\"+`raw //lit` ttl=1m"},
			check: func(t *testing.T, s *Spec) {
				require.Len(t, s.Key.Operands, 3)
				assert.Equal(t, "x = y", s.Key.Operands[1].Value)
				assert.Equal(t, "raw //lit", s.Key.Operands[2].Value)
				assert.Equal(t, time.Minute, s.TTL.D)
			},
		},
		{
			name:  "days",
			lines: []string{"//idem:key=id ttl=7d lease=1d12h"},
			check: func(t *testing.T, s *Spec) {
				assert.Equal(t, 7*24*time.Hour, s.TTL.D)
				assert.Equal(t, 36*time.Hour, s.Lease.D)
			},
		},
		{
			name:  "method call, tenant, hash list, op, reject",
			lines: []string{"//idem:key=msg.Key()+tenant+msg.Meta.Seq() hash=msg,extra inflight=reject op=orders.v2/Pay-x:1 ttl=90m"},
			check: func(t *testing.T, s *Spec) {
				assert.Equal(t, []Selector{{Name: "msg", Pos: s.Key.ValuePos}, {Name: "Key", Pos: s.Key.ValuePos + 4, Call: true}}, s.Key.Operands[0].Path)
				assert.Equal(t, "tenant", s.Key.Operands[1].Path[0].Name)
				assert.Len(t, s.Key.Operands[2].Path, 3)
				assert.True(t, s.Key.Operands[2].Path[2].Call)
				assert.Equal(t, []string{"msg", "extra"}, []string{s.Hash.Names[0].Name, s.Hash.Names[1].Name})
				assert.False(t, s.Inflight.Wait)
				assert.Equal(t, "orders.v2/Pay-x:1", s.Op.Text)
			},
			str: "//idem:key=msg.Key()+tenant+msg.Meta.Seq() ttl=90m inflight=reject hash=msg,extra op=orders.v2/Pay-x:1",
		},
		{
			name:  "hash none, tabs",
			lines: []string{"//idem:key=id\thash=none\tttl=1s"},
			check: func(t *testing.T, s *Spec) { assert.True(t, s.Hash.None) },
			str:   "//idem:key=id ttl=1s hash=none",
		},
		{
			name:  "defaults",
			lines: []string{"//idem:defaults ttl=24h lease=10s", "//idem:defaults final=ErrA"},
			check: func(t *testing.T, s *Spec) {
				assert.True(t, s.Defaults)
				assert.Nil(t, s.Key)
				assert.Equal(t, 24*time.Hour, s.TTL.D)
			},
			str: "//idem:defaults ttl=24h lease=10s final=ErrA",
		},
		{
			name:  "no key yet (from defaults)",
			lines: []string{"//idem:ttl=1h"},
			check: func(t *testing.T, s *Spec) { assert.Nil(t, s.Key) },
		},
		{
			name:  "zero backoff, retries 0",
			lines: []string{"//idem:key=a retries=0 timeout=1s backoff=0s"},
			check: func(t *testing.T, s *Spec) {
				assert.Equal(t, 0, s.Retries.N)
				assert.Equal(t, time.Duration(0), s.Backoff.D)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseLines(t, tt.lines...)
			require.NoError(t, err)
			require.NotNil(t, s)
			tt.check(t, s)
			want := tt.str
			if want == "" {
				want = tt.lines[0]
			}
			assert.Equal(t, want, s.String())
			again, err := parseLines(t, s.String())
			require.NoError(t, err)
			assert.True(t, s.Equal(again), "round trip: %s", s)
		})
	}
}

func TestParseNone(t *testing.T) {
	s, err := parseLines(t, "// Pay pays.", "// idem: is the package that...")
	assert.NoError(t, err)
	assert.Nil(t, s)
	s, err = Parse(token.NewFileSet(), nil)
	assert.NoError(t, err)
	assert.Nil(t, s)
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  []string
	}{
		{"unknown with suggestion", []string{"//idem:key=order.ID+op tll=155s"},
			[]string{`3:24: unknown option "tll"; did you mean "ttl"?`}},
		{"renew value", []string{"//idem:key=a ttl=1s renew=yes"},
			[]string{`3:27: malformed renew=yes: want true (renew the lease while the method runs) or false`}},
		{"codec value", []string{"//idem:key=a ttl=1s codec=gob"},
			[]string{`3:27: malformed codec=gob: want json (the default, checked by idemgen) or custom (a codec set with idem.WithCodec)`}},
		{"unknown far", []string{"//idem:key=a ttl=1s zzzzzzzz=1"},
			[]string{`3:21: unknown option "zzzzzzzz"; options are key, ttl, retries, timeout, backoff, downstream, margin, lease, inflight, hash, final, op, codec, renew`}},
		{"unknown bare word", []string{"//idem:key=a retires"},
			[]string{`3:14: unknown option "retires"; did you mean "retries"?`}},
		{"repeated", []string{"//idem:key=a ttl=1s", "//idem:ttl=2s"},
			[]string{`4:8: repeated option "ttl" (first at 3:14)`}},
		{"no value", []string{"//idem:key ttl=1s"},
			[]string{`3:8: option "key" needs a value: key=...`}},
		{"empty value", []string{"//idem:key= ttl=1s"},
			[]string{`3:12: option key has an empty value`}},
		{"empty line", []string{"//idem:"},
			[]string{`3:1: empty //idem: line: write //idem:key=... ttl=...`}},
		{"empty defaults", []string{"//idem:defaults"},
			[]string{`3:1: //idem:defaults without options`}},
		{"defaults later", []string{"//idem:key=a defaults"},
			[]string{`3:14: defaults must come first: //idem:defaults <options>, on a type's doc comment`}},
		{"defaults as option", []string{"//idem:defaults=1"},
			[]string{`3:8: defaults is not an option: write //idem:defaults <options>, on a type's doc comment`}},
		{"mixed defaults", []string{"//idem:key=a", "//idem:defaults ttl=1s"},
			[]string{`4:8: //idem:defaults mixed with method options in one doc comment: defaults go on a type, the others on a method`}},
		{"mixed defaults 2", []string{"//idem:defaults ttl=1s", "//idem:key=a"},
			[]string{`4:8: method options mixed with //idem:defaults in one doc comment: defaults go on a type, the others on a method`}},
		{"missing name", []string{"//idem:=a"},
			[]string{`3:8: missing option name before '='`}},
		{"stray token", []string{"//idem:key=a ,"},
			[]string{`3:14: unexpected ",": options are name=value, separated by spaces`}},
		{"space in key", []string{"//idem:key=order.ID + op ttl=1s"},
			[]string{`3:21: unexpected "+": a key has no spaces outside string literals`, `3:23: option "op" needs a value: op=...`}},
		{"space in key 2", []string{"//idem:key=order.ID+ x"},
			[]string{`3:21: malformed key: expected operand, found 'EOF'`, `3:22: unexpected "x": a key has no spaces outside string literals`}},
		{"bad duration", []string{"//idem:key=a ttl=5x"},
			[]string{`3:18: malformed duration ttl=5x: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h`}},
		{"negative duration", []string{"//idem:key=a ttl=-5s"},
			[]string{`3:18: malformed duration ttl=-5s: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h`}},
		{"days last", []string{"//idem:key=a ttl=1h2d"},
			[]string{`3:18: malformed duration ttl=1h2d: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h`}},
		{"huge days", []string{"//idem:key=a ttl=999999999d"},
			[]string{`3:18: duration ttl=999999999d exceeds the maximum a duration can hold, about 106751d (292 years)`}},
		{"huge days 200000d", []string{"//idem:key=a ttl=200000d"},
			[]string{`3:18: duration ttl=200000d exceeds the maximum a duration can hold, about 106751d (292 years)`}},
		{"huge days plus hours", []string{"//idem:key=a ttl=106751d24h"},
			[]string{`3:18: duration ttl=106751d24h exceeds the maximum a duration can hold, about 106751d (292 years)`}},
		{"huge hours", []string{"//idem:key=a lease=99999999999h"},
			[]string{`3:20: duration lease=99999999999h exceeds the maximum a duration can hold, about 106751d (292 years)`}},
		{"huge and malformed", []string{"//idem:key=a ttl=99999999999x"},
			[]string{`3:18: malformed duration ttl=99999999999x: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h`}},
		{"zero ttl", []string{"//idem:key=a ttl=0s"},
			[]string{`3:18: ttl must be positive, not 0s`}},
		{"zero timeout", []string{"//idem:key=a retries=1 timeout=0s"},
			[]string{`3:32: timeout must be positive, not 0s`}},
		{"bad retries", []string{"//idem:key=a retries=-1 ttl=1s"},
			[]string{`3:22: malformed retries=-1: want a whole number like 3`}},
		{"huge retries", []string{"//idem:key=a retries=99999999999999999999"},
			[]string{`3:22: retries=99999999999999999999 is too large (at most 1000000)`}},
		{"inflight bad", []string{"//idem:key=a inflight=block"},
			[]string{`3:23: malformed inflight=block: want reject or wait:<duration>`}},
		{"inflight wait no dur", []string{"//idem:key=a inflight=wait"},
			[]string{`3:23: inflight=wait needs a duration: inflight=wait:3s`}},
		{"inflight wait zero", []string{"//idem:key=a inflight=wait:0s"},
			[]string{`3:28: inflight wait must be positive, not 0s`}},
		{"inflight wait bad", []string{"//idem:key=a inflight=wait:soon"},
			[]string{`3:28: malformed duration inflight wait=soon: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h`}},
		{"hash empty element", []string{"//idem:key=a hash=a,,b"},
			[]string{`3:21: empty name in hash=a,,b`}},
		{"hash dup", []string{"//idem:key=a hash=a,b,a"},
			[]string{`3:23: hash lists "a" twice`}},
		{"hash none mixed", []string{"//idem:key=a hash=a,none"},
			[]string{`3:21: hash=none cannot be combined with parameter names`}},
		{"hash bad name", []string{"//idem:key=a hash=a.b"},
			[]string{`3:19: malformed parameter name "a.b" in hash`}},
		{"final bad", []string{"//idem:key=a final=ErrA|a.b.c|1x"},
			[]string{`3:25: malformed name "a.b.c" in final: want ErrName or pkg.ErrName`, `3:31: malformed name "1x" in final: want ErrName or pkg.ErrName`}},
		{"final dup", []string{"//idem:key=a final=ErrA|ErrA"},
			[]string{`3:25: final lists "ErrA" twice`}},
		{"op bad", []string{"//idem:key=a op=pay!"},
			[]string{`3:20: malformed op=pay!: '!' is not allowed (use letters, digits and _ . - / :)`}},
		{"key syntax", []string{"//idem:key=order. ttl=1s"},
			[]string{`3:18: malformed key: expected selector or type assertion, found 'EOF'`}},
		{"key minus", []string{"//idem:key=a-b"},
			[]string{`3:13: - in a key: key parts are joined by +`}},
		{"key int literal", []string{"//idem:key=a+5"},
			[]string{`3:14: 5 in a key: only string literals are allowed (write "5")`}},
		{"key empty literal", []string{`//idem:key=a+""`},
			[]string{`3:14: empty string literal in a key`}},
		{"key call with args", []string{"//idem:key=a.Key(1)"},
			[]string{`3:17: method Key in a key is called with arguments: only methods without arguments are allowed`}},
		{"key func call", []string{"//idem:key=f()+a"},
			[]string{`3:12: a call in a key must be a method of a parameter path, like req.Key()`}},
		{"key index", []string{"//idem:key=a+b[0]"},
			[]string{`3:14: an index expression in a key: key parts are parameter paths (req.ID, msg.Key()), string literals, op and tenant, joined by +`}},
		{"key parens", []string{"//idem:key=(a+b)"},
			[]string{`3:12: parentheses in a key: key parts are parameter paths (req.ID, msg.Key()), string literals, op and tenant, joined by +`}},
		{"key underscore", []string{"//idem:key=_"},
			[]string{`3:12: _ in a key: name a parameter`}},
		{"key trailing comment", []string{"//idem:key=a/*x*/"},
			[]string{`3:13: malformed key: unexpected text "/*x*/"`}},
		{"unterminated literal", []string{`//idem:key=a+"open ttl=1s`},
			[]string{`3:14: string literal not terminated`}},
		{"unterminated raw", []string{"//idem:key=a+`open ttl=1s"},
			[]string{"3:14: raw string literal not terminated"}},
		{"several at once", []string{"//idem:key=a tll=1s", "//idem:retries=x lease=1y"},
			[]string{`3:14: unknown option "tll"; did you mean "ttl"?`, `4:16: malformed retries=x: want a whole number like 3`, `4:24: malformed duration lease=1y: want a Go duration like 500ms, 2m30s or 72h, optionally with leading days like 7d or 1d12h`}},
		{"column after tab", []string{"\t//idem:key=a tll=1s"},
			[]string{`3:15: unknown option "tll"; did you mean "ttl"?`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseLines(t, tt.lines...)
			require.Error(t, err)
			assert.Equal(t, tt.want, stripFile(errLines(err), "a.go"))
		})
	}
}

func TestEditDistance(t *testing.T) {
	assert.Equal(t, 1, editDistance("tll", "ttl"))
	assert.Equal(t, 0, editDistance("key", "key"))
	assert.Equal(t, 3, editDistance("", "abc"))
	assert.Equal(t, 2, editDistance("timout", "timeout")+1)
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"500ms": 500 * time.Millisecond, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour,
		"0d": 0, "2m30s": 150 * time.Second, "1.5h": 90 * time.Minute, "3µs": 3 * time.Microsecond,
	} {
		got, ok := parseDuration(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "d", "1d-1h", "+1s", ".5s", "1dd", "1d1d", "5", "1d ", "106751d23h47m16s854775808ns"} {
		_, ok := parseDuration(in)
		assert.False(t, ok, in)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 155 * time.Second: "155s", 120 * time.Second: "2m", 36 * time.Hour: "36h",
		48 * time.Hour: "2d", 1500 * time.Millisecond: "1500ms", 3 * time.Microsecond: "3µs", 7: "7ns",
	} {
		assert.Equal(t, want, FormatDuration(d))
	}
}

// TestOptionsDocumented: every option of the table is documented in the
// package's grammar (Values) and in the options table of
// docs/ANNOTATIONS.md, and those document no option the table lacks.
func TestOptionsDocumented(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	_, values, ok := strings.Cut(string(src), "// Values:")
	require.True(t, ok, "doc.go has a Values section")
	values, _, _ = strings.Cut(values, "// #")
	md, err := os.ReadFile(filepath.Join("..", "docs", "ANNOTATIONS.md"))
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(md), "## Options")
	require.True(t, ok, "ANNOTATIONS.md has an Options section")
	table, _, _ = strings.Cut(table, "\n## ")
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " |"); ok && strings.HasPrefix(line, "| `") {
			for _, name := range strings.Fields(first) {
				documented[strings.Trim(name, "`")] = true
			}
		}
	}
	for _, name := range optionNames {
		assert.Regexp(t, `(?m)^//\s.*\b`+name+`\b`, values, "doc.go's Values section lacks %s", name)
		assert.True(t, documented[name], "docs/ANNOTATIONS.md's options table lacks %s", name)
		delete(documented, name)
	}
	assert.Empty(t, documented, "docs/ANNOTATIONS.md documents options the parser does not know")
}
