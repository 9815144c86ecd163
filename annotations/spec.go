package annotations

import (
	"go/token"
	"reflect"
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

// optionNames lists the options in the canonical order String writes them.
var optionNames = []string{
	"key", "ttl", "retries", "timeout", "backoff", "downstream", "margin",
	"lease", "inflight", "hash", "final", "op", "codec", "renew",
}

// opt returns the common part of the option called name, or nil.
func (s *Spec) opt(name string) *Opt {
	switch name {
	case "key":
		if s.Key != nil {
			return &s.Key.Opt
		}
	case "ttl":
		return durOpt(s.TTL)
	case "retries":
		if s.Retries != nil {
			return &s.Retries.Opt
		}
	case "timeout":
		return durOpt(s.Timeout)
	case "backoff":
		return durOpt(s.Backoff)
	case "downstream":
		return durOpt(s.Downstream)
	case "margin":
		return durOpt(s.Margin)
	case "lease":
		return durOpt(s.Lease)
	case "inflight":
		if s.Inflight != nil {
			return &s.Inflight.Opt
		}
	case "hash":
		if s.Hash != nil {
			return &s.Hash.Opt
		}
	case "final":
		if s.Final != nil {
			return &s.Final.Opt
		}
	case "op":
		if s.Op != nil {
			return &s.Op.Opt
		}
	case "codec":
		if s.Codec != nil {
			return &s.Codec.Opt
		}
	case "renew":
		if s.Renew != nil {
			return &s.Renew.Opt
		}
	}
	return nil
}

func durOpt(d *Duration) *Opt {
	if d == nil {
		return nil
	}
	return &d.Opt
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
	for _, name := range optionNames {
		if o := s.opt(name); o != nil {
			b.WriteString(sep)
			b.WriteString(name)
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
