package idem

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"
)

// fixedOrigin is a CallObserver and OriginObserver that gives one origin.
type fixedOrigin struct{ o TraceOrigin }

func (fixedOrigin) Event(Event)                   {}
func (fixedOrigin) Wait(time.Time, time.Duration) {}
func (fixedOrigin) End(time.Time, error)          {}
func (fixedOrigin) Method(ctx context.Context, _ time.Time) (context.Context, func(time.Time, error)) {
	return ctx, nil
}
func (fixedOrigin) StoreOp(ctx context.Context, _ string, _ time.Time) (context.Context, func(time.Time, error)) {
	return ctx, nil
}
func (f fixedOrigin) Origin() TraceOrigin     { return f.o }
func (fixedOrigin) Replaying(CallMeta, error) {}

// TestOriginMetaBound: the origin is kept while the outcome with it fits
// in MaxOutcomeLen, and left out (never the outcome refused) beyond; with
// or without the result type's field, which is kept either way and read
// back beside the origin.
func TestOriginMetaBound(t *testing.T) {
	o := TraceOrigin{TraceID: [16]byte{1}, SpanID: [8]byte{2}, Flags: 1}
	obs := fixedOrigin{o}
	typed := resultMeta(reflect.TypeFor[struct{ A int }]())
	for _, base := range [][]byte{nil, typed} {
		for _, c := range []struct {
			n    int
			kept bool
		}{
			{0, true},
			{MaxOutcomeLen - MaxMetaLen, true},
			{MaxOutcomeLen - MaxMetaLen + 1, false},
			{MaxOutcomeLen, false},
		} {
			meta := originMeta(obs, c.n, base)
			m, err := ParseMeta(meta)
			if err != nil {
				t.Fatalf("outcome of %d bytes: %v", c.n, err)
			}
			if got := m.Origin.IsValid(); got != c.kept {
				t.Errorf("outcome of %d bytes, base %x: origin kept %v, want %v", c.n, base, got, c.kept)
			}
			if c.kept && c.n+len(meta) > MaxOutcomeLen {
				t.Errorf("outcome of %d bytes and %d of meta exceed MaxOutcomeLen", c.n, len(meta))
			}
			if b, _ := ParseMeta(base); m.ResultShape != b.ResultShape {
				t.Errorf("outcome of %d bytes, base %x: result shape %x", c.n, base, m.ResultShape)
			}
		}
		if meta := originMeta(fixedOrigin{}, 0, base); !bytes.Equal(meta, base) {
			t.Errorf("an invalid origin is kept: %x", meta)
		}
		if meta := originMeta(nil, 0, base); !bytes.Equal(meta, base) {
			t.Errorf("no observer: %x", meta)
		}
	}
	if len(typed) != cap(typed) {
		t.Errorf("the shared result-type meta has room to append in place: len %d, cap %d", len(typed), cap(typed))
	}
}
