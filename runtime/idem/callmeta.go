package idem

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// This file defines what the executor keeps about a call beside its stored
// outcome, in Outcome.Meta, and how a CallObserver takes part: the origin of
// the outcome (the span of the call that ran the method), so that a replay
// can point at it (runtime/idemotel links the replay's span to that trace).
// See docs/decisions/replay-links.md.
//
// The encoding of Outcome.Meta, version 1:
//
//	meta  = version field*        (empty: no metadata, as every record written before)
//	version = 0x01
//	field = tag len value         (tag: one byte, not 0; len: a uvarint)
//	tag 1 = the origin: trace ID (16 bytes), span ID (8), trace flags (1);
//	        a value longer than 25 bytes is read by its first 25
//	tag 2 = the result type's shape (CallMeta.ResultShape): 8 bytes of a
//	        SHA-256 (resulttype.go), written with a success encoded by
//	        JSONCodec; a replay into a type of that shape decodes without
//	        JSONCodec's strict checks
//
// A reader skips the fields whose tag it does not know, so that a later
// release can add fields without a new version; a new version byte is for
// a change that an older reader must not misread, and an older reader
// ignores the whole Meta then. Stores keep Meta byte for byte (idemtest
// checks it) and never read it.

// MetaVersion is the first byte of the Outcome.Meta the executor writes.
const MetaVersion = 1

// The tags of the fields of Meta version 1.
const (
	metaOrigin      = 1
	metaResultShape = 2
)

// originLen is the length of an encoded TraceOrigin.
const originLen = 16 + 8 + 1

// MaxMetaLen is the most bytes of Outcome.Meta the executor writes for a
// call: its version, the origin field and the result type's field. An
// observer cannot grow a record beyond it: the origin has a fixed size.
const MaxMetaLen = 1 + 2 + originLen + 2 + 8

// ErrUnreadableMeta is what an OriginObserver is told (wrapped) when a
// replayed record's Outcome.Meta cannot be read: a version this release
// does not know (written by a later one), or damaged bytes. The replay goes
// on; only the metadata is ignored.
var ErrUnreadableMeta = errors.New("idem: the record's metadata cannot be read")

// TraceOrigin names a span in W3C Trace Context terms
// (https://www.w3.org/TR/trace-context/): for a stored outcome, the span of
// the call that ran the method. Its zero value names none.
type TraceOrigin struct {
	TraceID [16]byte
	SpanID  [8]byte
	// Flags are the trace flags; bit 0 says the span was sampled.
	Flags byte
}

// IsValid reports whether o names a span: its trace ID and span ID are not
// all zeros (the W3C rule).
func (o TraceOrigin) IsValid() bool {
	return o.TraceID != [16]byte{} && o.SpanID != [8]byte{}
}

// Traceparent returns o as a W3C traceparent value,
// "00-<trace ID>-<span ID>-<flags>" in lower-case hex, or "" when o is not
// valid.
func (o TraceOrigin) Traceparent() string {
	if !o.IsValid() {
		return ""
	}
	return "00-" + hex.EncodeToString(o.TraceID[:]) + "-" + hex.EncodeToString(o.SpanID[:]) + "-" + hex.EncodeToString([]byte{o.Flags})
}

// CallMeta is what the executor keeps about a call in its stored outcome's
// Meta (see MetaVersion). Its zero value keeps nothing.
type CallMeta struct {
	// Origin is the span of the call that stored the outcome, as its
	// OriginObserver gave it; zero when none was kept.
	Origin TraceOrigin
	// ResultShape names the shape of the type whose encoding is the stored
	// body, as encoding/json sees it (a hash of its fields' names, tags and
	// types at every depth): the executor keeps it with every success it
	// encodes with JSONCodec, and a replay into a type of the same shape
	// decodes without JSONCodec's strict checks (they cannot fail then).
	// Zero when none was kept (another codec, a final error, a record
	// written before it existed).
	ResultShape [8]byte
}

// IsZero reports whether m keeps nothing.
func (m CallMeta) IsZero() bool { return !m.Origin.IsValid() && m.ResultShape == [8]byte{} }

// Append appends m's encoding (at most MaxMetaLen bytes) to dst and returns
// the extended slice; it appends nothing when m keeps nothing, so that a
// record without metadata has an empty Meta, as records written before.
func (m CallMeta) Append(dst []byte) []byte {
	if m.IsZero() {
		return dst
	}
	dst = append(dst, MetaVersion)
	if o := m.Origin; o.IsValid() {
		dst = append(dst, metaOrigin, originLen)
		dst = append(dst, o.TraceID[:]...)
		dst = append(dst, o.SpanID[:]...)
		dst = append(dst, o.Flags)
	}
	if m.ResultShape != [8]byte{} {
		dst = append(dst, metaResultShape, byte(len(m.ResultShape)))
		dst = append(dst, m.ResultShape[:]...)
	}
	return dst
}

// ParseMeta reads an Outcome.Meta the executor wrote. An empty meta is the
// zero CallMeta (a record written without metadata, or before it existed).
// Fields of version 1 that this release does not know are skipped. Another
// version, or bytes that do not parse, are an error wrapping
// ErrUnreadableMeta, with the zero CallMeta: nothing of them is trusted.
// ParseMeta does not allocate unless it fails.
func ParseMeta(meta []byte) (CallMeta, error) {
	var m CallMeta
	if len(meta) == 0 {
		return m, nil
	}
	if meta[0] != MetaVersion {
		return CallMeta{}, fmt.Errorf("%w: version %d (this release reads version %d)", ErrUnreadableMeta, meta[0], MetaVersion)
	}
	seen, shaped := false, false
	for b := meta[1:]; len(b) > 0; {
		tag := b[0]
		n, w := binary.Uvarint(b[1:])
		if tag == 0 || w <= 0 || n > uint64(len(b)-1-w) {
			return CallMeta{}, fmt.Errorf("%w: a damaged field at byte %d of %d", ErrUnreadableMeta, len(meta)-len(b), len(meta))
		}
		val := b[1+w : 1+w+int(n)]
		b = b[1+w+int(n):]
		switch tag {
		case metaOrigin:
			if seen || len(val) < originLen {
				return CallMeta{}, fmt.Errorf("%w: an origin field of %d bytes (want %d, once)", ErrUnreadableMeta, len(val), originLen)
			}
			seen = true
			copy(m.Origin.TraceID[:], val[:16])
			copy(m.Origin.SpanID[:], val[16:24])
			m.Origin.Flags = val[24]
		case metaResultShape:
			if shaped || len(val) != len(m.ResultShape) {
				return CallMeta{}, fmt.Errorf("%w: a result shape field of %d bytes (want %d, once)", ErrUnreadableMeta, len(val), len(m.ResultShape))
			}
			shaped = true
			copy(m.ResultShape[:], val)
		}
		// Any other tag is a later release's field.
	}
	return m, nil
}

// OriginObserver is implemented by a CallObserver (see CallHook) that keeps
// the identity of the call that stored an outcome beside it, and is told it
// when the outcome is replayed: runtime/idemotel links a replay's span to
// the span of the call that ran the method, also when the replay comes
// from another process (a restart, another replica) over the same store.
// The executor finds it by a type assertion on the observer StartCall
// returned; a call whose observer does not implement it stores no
// metadata, reads none, and allocates nothing for it.
//
// In a stored outcome, the origin takes MaxMetaLen bytes of Outcome.Meta.
// They count towards MaxOutcomeLen, but never make an outcome too large:
// when the outcome is within MaxMetaLen bytes of the limit, it is stored
// without its origin. The outcome stored in place of one that cannot be
// stored (NotStoredCode) carries no origin either.
type OriginObserver interface {
	// Origin returns the origin to keep with the call's outcome; an origin
	// that is not valid (TraceOrigin.IsValid) keeps none. It is called
	// from the call's goroutine once the method returned and its outcome
	// is decided, before the outcome is stored (in lease mode and in
	// transactional mode alike).
	Origin() TraceOrigin
	// Replaying is called from the call's goroutine, before End, when the
	// call is answered from a stored record: a replay (a retry, or a
	// duplicate that waited for the call that ran: Method.Wait, or a
	// transactional store's wait) or a stored result that no longer
	// decodes (ErrUndecodable). meta is what the record keeps of the call
	// that stored it: zero when it keeps nothing (written by a call
	// without an OriginObserver, or before metadata existed). err, which
	// wraps ErrUnreadableMeta, says that the record's Meta could not be
	// read (a later version, damaged bytes); meta is zero then, and the
	// replay goes on as if there were none.
	Replaying(meta CallMeta, err error)
}

// originMeta returns the Meta to store with an outcome of n bytes (Body,
// ErrCode, ErrMessage) for the call observed by on: base (the result
// type's field, or nil) and the origin when on is an OriginObserver that
// gives a valid one and it fits within MaxOutcomeLen, else base.
func originMeta(on CallObserver, n int, base []byte) []byte {
	oo, ok := on.(OriginObserver)
	if !ok {
		return base
	}
	m := CallMeta{Origin: oo.Origin()}
	if !m.Origin.IsValid() || n+MaxMetaLen > MaxOutcomeLen {
		return base
	}
	if len(base) > 0 {
		m.ResultShape = [8]byte(base[len(base)-8:]) // base is resultMeta's
	}
	return m.Append(make([]byte, 0, MaxMetaLen))
}

// replaying tells on, when it is an OriginObserver, what the Meta of the
// record it answers from keeps of the call that stored it.
func replaying(on CallObserver, meta []byte) {
	oo, ok := on.(OriginObserver)
	if !ok {
		return
	}
	oo.Replaying(ParseMeta(meta))
}
