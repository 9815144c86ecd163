package annotations

import (
	"go/token"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Spec is one parsed annotation: the //idem: lines of one doc comment,
// merged. It is syntax only: names are not yet bound to parameters or
// variables (ResolvePackage does that). A nil option field means the option
// was not written.
type Spec struct {
	// Defaults is true for "//idem:defaults" lines on a type's doc comment.
	Defaults bool
	// Pos is the "//" of the first //idem: line.
	Pos token.Pos

	Key        *KeyExpr
	TTL        *Duration
	Retries    *Int
	Timeout    *Duration
	Backoff    *Duration
	Downstream *Duration
	Margin     *Duration
	Lease      *Duration
	Inflight   *Inflight
	Hash       *NameList
	Final      *NameList
	Op         *Op
	Codec      *Codec
	Renew      *Bool
}

// Opt is what every option value records: where its name and value are
// and the value exactly as written.
type Opt struct {
	NamePos  token.Pos // the first byte of the option's name
	ValuePos token.Pos // the first byte of the value, after '='
	Text     string    // the value as written
}

// Duration is a duration option (ttl, timeout, backoff, downstream, margin,
// lease): a Go duration, with an optional leading number of days ("7d",
// "1d12h").
type Duration struct {
	Opt
	D time.Duration
}

// Int is an integer option (retries).
type Int struct {
	Opt
	N int
}

// Inflight is the inflight option: "reject", or "wait:<duration>".
type Inflight struct {
	Opt
	Wait bool
	D    time.Duration // for wait; its text starts at ValuePos+5
}

// NameList is the hash option ("a,b" or "none") or the final option
// ("ErrA|pkg.ErrB").
type NameList struct {
	Opt
	None  bool // hash=none
	Names []Name
}

// Name is one name in a hash or final list. Qual is the package name of a
// qualified final name ("pkg" in "pkg.ErrX"), empty otherwise.
type Name struct {
	Qual string
	Name string
	Pos  token.Pos // the first byte (of Qual when qualified)
}

// String returns the name as written: "ErrX" or "pkg.ErrX".
func (n Name) String() string {
	if n.Qual != "" {
		return n.Qual + "." + n.Name
	}
	return n.Name
}

// Op is the op option: the operation name stored in records (Text).
type Op struct {
	Opt
}

// Codec is the codec option: "json" (the default: results must round-trip
// through encoding/json, which the generator checks) or "custom" (the
// executor has a codec of the user's, set with idem.WithCodec, that carries
// the result type; the generator does not check it).
type Codec struct {
	Opt
	Custom bool
}

// Bool is a boolean option (renew): "true" or "false".
type Bool struct {
	Opt
	B bool
}

// KeyExpr is the key option: operands joined by '+'.
type KeyExpr struct {
	Opt
	Operands []Operand
}

// Operand is one operand of a key expression: a string literal, or a path
// (a name followed by selectors and no-argument method calls). The names
// op and tenant are paths of one element here; ResolvePackage decides whether
// they name a parameter or the operation / the tenant.
type Operand struct {
	Pos  token.Pos
	Text string // as written

	Literal bool
	Value   string // the unquoted literal

	// Path: Path[0] is the root name (Call is false for it).
	Path []Selector
}

// Selector is one name in an operand's path.
type Selector struct {
	Name string
	Pos  token.Pos
	Call bool // a no-argument method call: Key()
}

// option is one annotation option: its name, where a Spec holds it, and
// how its value is parsed into the Spec.
type option struct {
	name string
	// get returns the option's common part in s, or nil when it was not
	// written.
	get func(s *Spec) *Opt
	// parse parses a value written for the option and stores it in
	// p.spec, or reports it malformed.
	parse func(p *lineParser, name string, o Opt)
	// budget marks the options of the retry budget.
	budget bool
}

// options is the one table of annotation options, in the canonical order
// Spec.String writes them (as controller-tools derives its markers from one
// registry): the parser (known names, repeats, values), the unknown-option
// error and its suggestion, Spec.String, the scanner's recognition of an
// //idem: line, and the check that docs/ANNOTATIONS.md documents every
// option (TestOptionsDocumented) all read it. A new option is one row here
// and one field of Spec.
var options = []option{
	{"key", func(s *Spec) *Opt { return optOf(s.Key) }, (*lineParser).keyOption, false},
	{"ttl", func(s *Spec) *Opt { return optOf(s.TTL) }, durationOption(true, func(s *Spec) **Duration { return &s.TTL }), false},
	{"retries", func(s *Spec) *Opt { return optOf(s.Retries) }, (*lineParser).retriesOption, true},
	{"timeout", func(s *Spec) *Opt { return optOf(s.Timeout) }, durationOption(true, func(s *Spec) **Duration { return &s.Timeout }), true},
	{"backoff", func(s *Spec) *Opt { return optOf(s.Backoff) }, durationOption(false, func(s *Spec) **Duration { return &s.Backoff }), true},
	{"downstream", func(s *Spec) *Opt { return optOf(s.Downstream) }, durationOption(false, func(s *Spec) **Duration { return &s.Downstream }), true},
	{"margin", func(s *Spec) *Opt { return optOf(s.Margin) }, durationOption(false, func(s *Spec) **Duration { return &s.Margin }), true},
	{"lease", func(s *Spec) *Opt { return optOf(s.Lease) }, durationOption(true, func(s *Spec) **Duration { return &s.Lease }), false},
	{"inflight", func(s *Spec) *Opt { return optOf(s.Inflight) }, (*lineParser).inflightOption, false},
	{"hash", func(s *Spec) *Opt { return optOf(s.Hash) }, (*lineParser).hashOption, false},
	{"final", func(s *Spec) *Opt { return optOf(s.Final) }, (*lineParser).finalOption, false},
	{"op", func(s *Spec) *Opt { return optOf(s.Op) }, (*lineParser).opOption, false},
	{"codec", func(s *Spec) *Opt { return optOf(s.Codec) }, (*lineParser).codecOption, false},
	{"renew", func(s *Spec) *Opt { return optOf(s.Renew) }, (*lineParser).renewOption, false},
}

// optionNames are the options' names, in the table's order.
var optionNames = func() []string {
	names := make([]string, len(options))
	for i, o := range options {
		names[i] = o.name
	}
	return names
}()

// lookupOption returns the option called name.
func lookupOption(name string) (option, bool) {
	i := slices.IndexFunc(options, func(o option) bool { return o.name == name })
	if i < 0 {
		return option{}, false
	}
	return options[i], true
}

// isOption reports whether name is an option's name.
func isOption(name string) bool {
	_, ok := lookupOption(name)
	return ok
}

// common is promoted to every option value type, which embeds Opt.
func (o *Opt) common() *Opt { return o }

// optOf returns the common part of an option value, or nil for none.
func optOf[T interface {
	comparable
	common() *Opt
}](v T) *Opt {
	var none T
	if v == none {
		return nil
	}
	return v.common()
}

// opt returns the common part of the option called name, or nil.
func (s *Spec) opt(name string) *Opt {
	if o, ok := lookupOption(name); ok {
		return o.get(s)
	}
	return nil
}

// String returns the Spec as one //idem: line, options in a canonical order
// (key ttl retries timeout backoff downstream margin lease inflight hash final
// op codec renew), each value as written. Parsing it gives a Spec Equal to s.
func (s *Spec) String() string {
	var b strings.Builder
	b.WriteString(directive)
	sep := ""
	if s.Defaults {
		b.WriteString("defaults")
		sep = " "
	}
	for _, opt := range options {
		if o := opt.get(s); o != nil {
			b.WriteString(sep)
			b.WriteString(opt.name)
			b.WriteByte('=')
			b.WriteString(o.Text)
			sep = " "
		}
	}
	return b.String()
}

// Equal reports whether s and t hold the same options with the same values,
// ignoring positions.
func (s *Spec) Equal(t *Spec) bool {
	if s == nil || t == nil {
		return s == t
	}
	return reflect.DeepEqual(stripPos(reflect.ValueOf(*s)).Interface(), stripPos(reflect.ValueOf(*t)).Interface())
}

var posType = reflect.TypeFor[token.Pos]()

// stripPos returns a deep copy of v with every token.Pos zeroed.
func stripPos(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(stripPos(v.Elem()))
		return p
	case reflect.Struct:
		c := reflect.New(v.Type()).Elem()
		for i := range v.NumField() {
			if v.Type().Field(i).Type == posType {
				continue
			}
			c.Field(i).Set(stripPos(v.Field(i)))
		}
		return c
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			c.Index(i).Set(stripPos(v.Index(i)))
		}
		return c
	}
	return v
}
