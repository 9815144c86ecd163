// Package annotations reads the //idem: annotations of a Go package and
// resolves them, with go/types, into the model the templates emit code from.
//
// The path of one annotation:
//
//	//idem:key=order.ID+op ttl=155s            (a method's doc comment)
//	  ── Parse ──▶ Spec      syntax only, a position for every token
//	  ── ResolvePackage ──▶ Package/Type/Method   typed key parts, hash
//	                                               params, TTL, finals
//
// Parse knows nothing of go/types and never panics (it is fuzzed); ScanFile
// finds every //idem: line of a file and binds it to the declaration whose
// doc comment holds it; ResolvePackage does both for a type-checked package
// and checks every rule of ANNOTATIONS.md. Every mistake is an *Error at the
// column of the offending token inside the comment, and all of them are
// returned at once, sorted, as an ErrorList.
//
// # API
//
// The package is public, at the top level of the module, so that a linter,
// an editor integration or a generator of your own can read //idem:
// annotations with the same grammar, the same error columns and the same
// resolved model as idemgen (google/wire and sqlc keep theirs internal,
// because nothing but their command reads their syntax; an idemgen
// annotation is read by editors and CI checks too). What is kept compatible
// within a major version:
//
//   - the syntax layer: Parse, ScanFile, Annotation, IsDirective, Spec and
//     its option values (Opt, KeyExpr, Operand, Selector, Duration, Int,
//     Inflight, NameList, Name, Op, Codec, Bool), Spec.String and
//     Spec.Equal;
//   - ResolvePackage and the model's description of the annotation: Package,
//     Type, Method's Name, Op, Pos, Func, Sig, Params, Result, Key, Hash,
//     HashNone, TTL, Lease, Inflight, Wait, Renew, Final, Sentinels, Budget
//     and Constraint; Param, KeyPart's Kind, Expr, Pos, Literal, Param,
//     Steps and Type; Step, FinalRef, Budget, PartKind, InflightMode;
//   - Error and ErrorList, and FormatDuration.
//
// What may change in any release, because it is how the generated code is
// written rather than what the annotation says: the resolver's decisions
// for the templates (KeyPart.Encoding, NilCheck and Conv, Step.NilCheck,
// Method.Fingerprint and Scheme, and the types Encoding, Conversion,
// HashParam and HashValue), and the wording of error messages (their
// positions are kept). See docs/decisions/generator-api.md.
//
// # Grammar
//
// An annotation is one or more lines, each starting with "//idem:" (no space
// after the slashes), in the doc comment of a method of a named type, or of a
// method in an interface type. The lines of one doc comment form one Spec; an
// option may appear only once across them. A type's doc comment may hold
// "//idem:defaults <options>" lines, which apply to every annotated method of
// the type (a method's own option wins; op cannot be a default).
//
// Options are name=value, separated by spaces or tabs; a value has no spaces
// except inside a Go string literal ("..." or `...`). Text from an unquoted
// "//" preceded by a space to the end of the line is a trailing comment and is
// ignored:
//
//	//idem:retries=2 timeout=2s backoff=500ms   // ttl derived
//
// Values:
//
//	key=part{+part}       a Go expression: parameter paths (order.ID,
//	                      msg.Key()), string literals, op, tenant; no spaces
//	ttl timeout backoff downstream margin lease
//	                      Go durations plus a leading whole number of days:
//	                      7d, 1d12h, 500ms; no sign
//	retries=N             a non-negative integer
//	inflight=reject | inflight=wait:<duration>
//	hash=a,b | hash=none  parameter names
//	final=ErrA|pkg.ErrB   sentinel error variables
//	op=name               letters, digits and _ . - / :; the default is the
//	                      method qualified by its package's import path,
//	                      example.com/shop/payments.Service.Capture
//	codec=json | codec=custom
//	renew=true | renew=false
//
// # Strictness
//
// An //idem: line that does not belong to a method's or type's doc comment
// is an error (detached by a blank line, on a plain function, on a field, in
// a function body, in a trailing comment). So is "// idem:" with a space when
// what follows looks like an annotation (an option name followed by "=", or
// "defaults"): it is almost certainly a typo that would otherwise be silently
// ignored. Prose such as "// idem: see the runtime" is left alone, as are
// block comments that do not start with "/*idem:".
package annotations
