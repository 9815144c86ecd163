package annotations

import (
	"cmp"
	"go/token"
	"go/types"
	"slices"
	"strings"
	"time"
)

// This file is the contract between Resolve (which builds these values from a
// parsed Spec and go/types) and the templates (which emit code from them).
// Templates never look at syntax or at go/packages: a hand-built Package is
// enough to test them.

// Package is everything the generator emits for one Go package.
type Package struct {
	Name  string // package name, e.g. "orders"
	Path  string // import path
	Dir   string // directory the idem_gen.go file goes to
	Types []*Type
}

// Type is an annotated named type: a struct (or other non-interface named
// type with methods) or an interface.
type Type struct {
	Name      string
	Interface bool // wrapping an interface: next is the interface value
	Pos       token.Position
	Obj       *types.TypeName
	Methods   []*Method // annotated methods, in source order
	// Constraint is the build constraint of the file that declares the
	// type (its //go:build expression and its GOOS/GOARCH file-name
	// suffix, as one expression), or "" for none. Resolve leaves it empty;
	// the generator sets it, and the templates declare the wrapper type and
	// its constructor in the generated file of that constraint.
	Constraint string
}

// InflightMode is what a duplicate gets while the first call still runs.
type InflightMode uint8

const (
	// InflightReject returns idem.ErrInProgress at once (the default).
	InflightReject InflightMode = iota
	// InflightWait waits up to Method.Wait for the outcome and replays it.
	InflightWait
)

// Method is one annotated method, resolved.
type Method struct {
	Name string
	// Op is the operation name stored in records: op= when given, else the
	// method qualified by its package's import path,
	// "example.com/shop/payments.Service.Capture", so that methods of two
	// packages never share records.
	Op string
	// OpPos is where op= was written, or the method's position for a
	// default op (for the generator's duplicate-op errors).
	OpPos token.Position
	// FuncName is the fully qualified name of the method as the runtime
	// names functions: "example.com/shop/payments.(*Service).Capture" for
	// a pointer receiver, "example.com/shop/payments.Service.Capture"
	// otherwise (idem.Method.Func).
	FuncName string
	Pos      token.Position
	Func     *types.Func
	Sig      *types.Signature

	// Params are the method's parameters in order; Params[0] is the context.
	Params []Param
	// Result is the non-error result type, or nil for methods returning
	// only error.
	Result types.Type

	Key []KeyPart
	// Hash lists indexes into Params of the parameters that form the request
	// fingerprint, in parameter order. Empty with HashNone set means no
	// parameter is hashed (hash=none).
	Hash     []int
	HashNone bool
	// Fingerprint is how the wrapper adds each parameter of Hash to the
	// request fingerprint, in the same order; empty with HashNone.
	Fingerprint []HashParam
	// Scheme versions the fingerprint's layout (idem.Method.Scheme): a
	// hash of the encoding version and of the hashed types' structure.
	Scheme uint32
	// Layout is the hash of the hashed parameters' layout as reflection
	// sees it: the wrapper passes it to idem.CheckLayout, which refuses
	// every call when the program's types have another (a stale wrapper,
	// where the generated file cannot check the layout at compile time).
	// 0 when nothing is hashed.
	Layout uint32

	TTL      time.Duration
	Lease    time.Duration // 0: the executor's default
	Inflight InflightMode
	Wait     time.Duration // for InflightWait
	Renew    bool          // renew=true: the lease is renewed while the method runs
	Final    []FinalRef
	// Sentinels are the exported error variables of the method's package
	// that are not in Final: a Final error matching one replays
	// errors.Is-equal to it.
	Sentinels []FinalRef
	// Budget, when the annotation states a retry budget, for documentation
	// in the generated code.
	Budget *Budget
	// Constraint is the build constraint of the file that declares the
	// method, or "" for none (see Type.Constraint): its wrapper method goes
	// to the generated file of that constraint.
	Constraint string
}

// Budget is the retry budget an annotation states.
type Budget struct {
	Retries    int
	Timeout    time.Duration
	Backoff    time.Duration
	Downstream time.Duration
	Margin     time.Duration
}

// Total returns retries×(timeout+backoff)+downstream+margin.
func (b Budget) Total() time.Duration {
	return time.Duration(b.Retries)*(b.Timeout+b.Backoff) + b.Downstream + b.Margin
}

// Param is a method parameter. Name is never empty or "_": Resolve gives
// unnamed parameters a name ("p1", ...) that templates use in the wrapper's
// signature.
type Param struct {
	Name string
	Type types.Type
}

// PartKind says where a key part's value comes from.
type PartKind uint8

const (
	// PartPath is a parameter, possibly followed by fields and no-argument
	// methods: order.ID, req.Customer.ID, msg.Key().
	PartPath PartKind = iota + 1
	// PartLiteral is a string literal: "refund".
	PartLiteral
	// PartOp is the operation name (Method.Op).
	PartOp
	// PartTenant is the executor's tenant (read from the context at run time).
	PartTenant
	// PartClientKey is the idempotency key of the call the context belongs
	// to (idem.ClientKey: the Idempotency-Key of the idemhttp request, the
	// idempotency-key of the idemgrpc call, a consumer's message ID given
	// with idem.ContextWithKey), read at run time; absent, the call fails
	// with idem.ErrMissingKey.
	PartClientKey
)

// Encoding says how a key part's final value is added to idem.KeyParts. It
// is a decision of the resolver for the templates, not API (see the package
// doc).
type Encoding uint8

const (
	EncString      Encoding = iota + 1 // string kinds: KeyParts.String
	EncInt                             // signed integer kinds: KeyParts.Int(int64(v))
	EncUint                            // unsigned integer kinds: KeyParts.Uint(uint64(v))
	EncBool                            // bool: KeyParts.Bool
	EncBytes                           // byte arrays: KeyParts.Bytes(path, v[:])
	EncStringer                        // fmt.Stringer: KeyParts.Stringer
	EncTextMarshal                     // encoding.TextMarshaler: KeyParts.Text
	EncTime                            // time.Time, *time.Time, type T time.Time: KeyParts.Time (the instant)
)

// KeyPart is one operand of the key expression.
type KeyPart struct {
	Kind PartKind
	// Expr is the operand as written, e.g. `order.ID` or `"refund"`; it
	// names the part in idem.ErrMissingKey.
	Expr string
	Pos  token.Position

	Literal string // PartLiteral: the unquoted value

	// PartPath: Param indexes Method.Params; Steps are the selectors after
	// the parameter name, in order.
	Param int
	Steps []Step
	// Type is the type of the part's final value; Encoding how it is added.
	Type     types.Type
	Encoding Encoding
	// NilCheck is true when the final value itself may be nil (a pointer or
	// an interface: a *T or fmt.Stringer part, or a bare pointer parameter
	// with no steps): the wrapper checks it and reports idem.ErrMissingKey
	// instead of calling a method on nil.
	NilCheck bool
	// Conv is how the final value is passed to the adder of Encoding.
	Conv Conversion
}

// Conversion is how the wrapper turns a value v into the argument of the
// idem.KeyParts or idem.Hasher method that adds it, applied in field order
// (*v, &v, v[:], string(v), To(v)). It is a decision of the resolver for
// the templates, not API (see the package doc):
//
//	string(id)   int64(n)   []byte(raw)   id[:]   []byte(string(id[:]))   &id   *at   time.Time(d)
type Conversion struct {
	Deref     bool // *v: a *time.Time, checked for nil before
	Addr      bool // &v: only *T has the String or MarshalText method
	Slice     bool // v[:]: an array of a byte kind
	ViaString bool // string(v): a []B or [N]B of a named byte type B, which does not convert to []byte
	// To is the adder's parameter type when v's type is another (a named
	// string type, a smaller integer, a named byte slice, a type defined
	// as time.Time); nil for none.
	To types.Type
}

// HashParam is how the wrapper adds one hashed parameter to the request
// fingerprint: a flat struct (every field of a basic kind) field by field
// with typed adders, anything else as one value. It is a decision of the
// resolver for the templates, not API (see the package doc).
type HashParam struct {
	Param int // index into Method.Params
	// NilCheck is true for a pointer to a flat struct and for a byte
	// slice: a nil adds Hasher.Nil, anything else its fields or its bytes
	// (so that nil differs from empty, as everywhere in a fingerprint).
	NilCheck bool
	Values   []HashValue
}

// HashValue is one idem.Hasher call: h.String(req.ID), h.Int(int64(n)),
// h.Value(order).
type HashValue struct {
	Field string // the struct field added, "" for the parameter itself
	// Adder is the Hasher method: String, Int, Uint, Float, Bool, Bytes,
	// Interface (a value of an interface type, with its dynamic type) or
	// Value (the runtime's canonical encoding).
	Adder string
	Conv  Conversion
}

// Step is one selector in a key path.
type Step struct {
	Name   string
	Method bool // a no-argument method call: .Key()
	// NilCheck is true when the value this step is applied to may be nil (a
	// pointer or an interface): the wrapper checks it and reports
	// idem.ErrMissingKey instead of panicking. A pointer is followed
	// implicitly, as Go's selector does.
	NilCheck bool
	// Type is the type of the value the step yields (the field's type, or
	// the method's result): the generated file asserts it at compile time,
	// so that a wrapper generated for another layout does not build.
	Type types.Type
}

// FinalRef is a sentinel error named in final=.
type FinalRef struct {
	// Name is the sentinel as written (e.g. "ErrInsufficientFunds" or
	// "payments.ErrClosed"); it is stored in records.
	Name string
	// Var is the package-level error variable.
	Var *types.Var
}

// Error is one annotation or type error, at the position of the offending
// token inside the comment (or of the declaration).
type Error struct {
	Pos token.Position
	Msg string
}

// Error returns "file:line:col: message".
func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

// ErrorList is every error found, sorted by position.
type ErrorList []*Error

// Error returns the errors one per line.
func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Sort orders the list by file, line and column, then message.
func (l ErrorList) Sort() {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.Pos.Filename, b.Pos.Filename),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
}
