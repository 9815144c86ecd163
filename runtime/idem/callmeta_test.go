package idem_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// origin returns a valid TraceOrigin whose IDs are made of n.
func origin(n byte) idem.TraceOrigin {
	var o idem.TraceOrigin
	for i := range o.TraceID {
		o.TraceID[i] = n
	}
	for i := range o.SpanID {
		o.SpanID[i] = n + 1
	}
	o.Flags = 1
	return o
}

// rawMeta builds a Meta from a version byte and fields (tag, value).
func rawMeta(version byte, fields ...any) []byte {
	b := []byte{version}
	for i := 0; i < len(fields); i += 2 {
		val := fields[i+1].([]byte)
		b = append(b, fields[i].(byte))
		b = binary.AppendUvarint(b, uint64(len(val)))
		b = append(b, val...)
	}
	return b
}

func originBytes(o idem.TraceOrigin) []byte {
	return append(append(o.TraceID[:], o.SpanID[:]...), o.Flags)
}

// TestParseMeta: the encoding of version 1, what a reader skips (fields of
// a later release) and what it refuses whole (another version, damaged
// fields), never trusting a part of damaged bytes.
func TestParseMeta(t *testing.T) {
	o := origin(7)
	valid := idem.CallMeta{Origin: o}.Append(nil)
	require.Len(t, valid, 1+2+16+8+1, "version, tag, length, origin")
	assert.Equal(t, rawMeta(1, byte(1), originBytes(o)), valid, "the documented layout")
	long := append(originBytes(o), 0xAA, 0xBB)
	shape := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	assert.Equal(t, rawMeta(1, byte(1), originBytes(o), byte(2), shape[:]), idem.CallMeta{Origin: o, ResultShape: shape}.Append(nil), "the documented layout: the origin, then the shape")
	for _, c := range []struct {
		name string
		meta []byte
		want idem.CallMeta
		err  string // "" when it parses
	}{
		{name: "empty: a record without metadata", meta: nil},
		{name: "version alone", meta: []byte{1}},
		{name: "origin", meta: valid, want: idem.CallMeta{Origin: o}},
		{name: "a later release's field is skipped", meta: rawMeta(1, byte(9), []byte("later"), byte(1), originBytes(o), byte(200), []byte{}), want: idem.CallMeta{Origin: o}},
		{name: "a longer origin is read by its first 25 bytes", meta: rawMeta(1, byte(1), long), want: idem.CallMeta{Origin: o}},
		{name: "unknown version", meta: append([]byte{2}, valid[1:]...), err: "version 2"},
		{name: "version 0", meta: []byte{0, 1, 2, 3}, err: "version 0"},
		{name: "text written by someone else", meta: []byte(`{"status":201}`), err: "version 123"},
		{name: "tag 0", meta: rawMeta(1, byte(0), []byte("x")), err: "damaged field at byte 1"},
		{name: "length past the end", meta: []byte{1, 1, 30, 0}, err: "damaged field"},
		{name: "length without its bytes", meta: []byte{1, 9}, err: "damaged field"},
		{name: "varint overflow", meta: []byte{1, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, err: "damaged field"},
		{name: "huge length", meta: append([]byte{1, 9}, binary.AppendUvarint(nil, math.MaxUint64)...), err: "damaged field"},
		{name: "short origin", meta: rawMeta(1, byte(1), originBytes(o)[:24]), err: "origin field of 24 bytes"},
		{name: "two origins", meta: rawMeta(1, byte(1), originBytes(o), byte(1), originBytes(origin(9))), err: "origin field of 25 bytes (want 25, once)"},
		{name: "origin and result shape", meta: rawMeta(1, byte(1), originBytes(o), byte(2), shape[:]), want: idem.CallMeta{Origin: o, ResultShape: shape}},
		{name: "result shape alone", meta: rawMeta(1, byte(2), shape[:]), want: idem.CallMeta{ResultShape: shape}},
		{name: "short result shape", meta: rawMeta(1, byte(2), shape[:7]), err: "result shape field of 7 bytes"},
		{name: "two result shapes", meta: rawMeta(1, byte(2), shape[:], byte(2), shape[:]), err: "result shape field of 8 bytes (want 8, once)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := idem.ParseMeta(c.meta)
			if c.err == "" {
				require.NoError(t, err)
				assert.Equal(t, c.want, got)
				return
			}
			require.ErrorIs(t, err, idem.ErrUnreadableMeta)
			assert.Contains(t, err.Error(), c.err)
			assert.Equal(t, idem.CallMeta{}, got, "nothing of unreadable bytes is trusted")
		})
	}
	t.Run("every truncation of a valid meta", func(t *testing.T) {
		for n := 2; n < len(valid); n++ {
			got, err := idem.ParseMeta(valid[:n])
			require.ErrorIs(t, err, idem.ErrUnreadableMeta, "%d bytes", n)
			assert.Equal(t, idem.CallMeta{}, got)
		}
	})
	t.Run("zero appends nothing", func(t *testing.T) {
		assert.Empty(t, idem.CallMeta{}.Append(nil))
		half := idem.TraceOrigin{TraceID: o.TraceID} // no span ID: not valid
		assert.Empty(t, idem.CallMeta{Origin: half}.Append(nil))
		assert.Equal(t, []byte("x"), idem.CallMeta{}.Append([]byte("x")))
	})
	t.Run("traceparent", func(t *testing.T) {
		assert.Equal(t, "00-07070707070707070707070707070707-0808080808080808-01", o.Traceparent())
		assert.Empty(t, idem.TraceOrigin{}.Traceparent())
	})
	t.Run("no allocation", func(t *testing.T) {
		if got := testing.AllocsPerRun(100, func() { _, _ = idem.ParseMeta(valid) }); got != 0 {
			t.Errorf("ParseMeta allocates %v times", got)
		}
	})
}

// FuzzParseMeta: no bytes make ParseMeta panic, and what it reads encodes
// back to bytes that read the same.
func FuzzParseMeta(f *testing.F) {
	f.Add([]byte{})
	f.Add(idem.CallMeta{Origin: origin(3)}.Append(nil))
	f.Add(rawMeta(1, byte(9), []byte("later"), byte(1), originBytes(origin(4))))
	f.Add([]byte{1, 1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := idem.ParseMeta(b)
		if err != nil {
			if !errors.Is(err, idem.ErrUnreadableMeta) || m != (idem.CallMeta{}) {
				t.Fatalf("ParseMeta(%x) = %+v, %v", b, m, err)
			}
			return
		}
		again, err := idem.ParseMeta(m.Append(nil))
		if err != nil || again != m {
			t.Fatalf("ParseMeta(%x) = %+v; its encoding reads %+v, %v", b, m, again, err)
		}
	})
}

// originHook is a CallHook whose observers are OriginObservers: call i
// (from 1) gives origin(i), unless zero is set; it records what replays
// are told.
type originHook struct {
	mu      sync.Mutex
	calls   byte
	zero    bool // give an invalid origin
	origins int  // Origin calls
	told    []replayTold
}

type replayTold struct {
	meta idem.CallMeta
	err  error
}

func (h *originHook) StartCall(ctx context.Context, _ *idem.Method, _ time.Time) (context.Context, idem.CallObserver) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	return ctx, &originCall{h: h, n: h.calls}
}

func (h *originHook) replays() []replayTold {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]replayTold(nil), h.told...)
}

type originCall struct {
	nopCall
	h *originHook
	n byte
}

func (c *originCall) Origin() idem.TraceOrigin {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	c.h.origins++
	if c.h.zero {
		return idem.TraceOrigin{}
	}
	return origin(c.n)
}

func (c *originCall) Replaying(meta idem.CallMeta, err error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	// The origin alone: the result's shape (CallMeta.ResultShape) is the
	// codec's business, checked in codec_deploy_test.go.
	c.h.told = append(c.h.told, replayTold{idem.CallMeta{Origin: meta.Origin}, err})
}

// nopCall is a CallObserver that does nothing.
type nopCall struct{}

func (nopCall) Event(idem.Event)              {}
func (nopCall) Wait(time.Time, time.Duration) {}
func (nopCall) End(time.Time, error)          {}
func (nopCall) Method(ctx context.Context, _ time.Time) (context.Context, func(time.Time, error)) {
	return ctx, func(time.Time, error) {}
}
func (nopCall) StoreOp(ctx context.Context, _ string, _ time.Time) (context.Context, func(time.Time, error)) {
	return ctx, func(time.Time, error) {}
}

// storedMeta returns the Meta of the record of id under op T.M.
func storedMeta(t *testing.T, st idem.AdminStore, id string) []byte {
	t.Helper()
	e, err := st.Lookup(t.Context(), mustKey(t, id))
	require.NoError(t, err)
	return e.Outcome.Meta
}

var errRefused = errors.New("refused")

// TestOriginKeptAndReplayed: an OriginObserver's origin is stored with the
// outcome (a result or a final error, lease and transactional modes) and
// told to every replay: by the same executor, by another one over the same
// store (a restart), and to a duplicate that waited for the call that ran.
func TestOriginKeptAndReplayed(t *testing.T) {
	m := &idem.Method{Op: "T.M", TTL: time.Minute, Final: []idem.FinalError{{Name: "ErrRefused", Err: errRefused}}}
	ok := func(context.Context) (int, error) { return 7, nil }
	declined := func(context.Context) (int, error) { return 0, errRefused }
	for _, mode := range []struct {
		name  string
		store func() (idem.Store, idem.AdminStore)
	}{
		{"lease mode", func() (idem.Store, idem.AdminStore) { s := newFaultStore(nil); return s, s.Store }},
		{"transactional mode", func() (idem.Store, idem.AdminStore) {
			s := &txStore{faultStore: newFaultStore(nil)}
			return s, s.Store
		}},
	} {
		for _, fn := range []struct {
			name string
			fn   func(context.Context) (int, error)
		}{{"result", ok}, {"final error", declined}} {
			t.Run(mode.name+"/"+fn.name, func(t *testing.T) {
				st, admin := mode.store()
				var h originHook
				ex := idem.NewExecutor(st, idem.WithCallHook(&h), idem.SingleTenant())
				v1, err1 := call(t.Context(), ex, m, "a", fn.fn)
				assert.Equal(t, origin(1), parsedMeta(t, storedMeta(t, admin, "a")).Origin)
				v2, err2 := call(t.Context(), ex, m, "a", ok)
				assert.Equal(t, v1, v2)
				assert.Equal(t, err1 == nil, err2 == nil)
				// A second executor over the same store: a restart.
				var h2 originHook
				h2.calls = 100
				ex2 := idem.NewExecutor(st, idem.WithCallHook(&h2), idem.SingleTenant())
				v3, err3 := call(t.Context(), ex2, m, "a", ok)
				assert.Equal(t, v1, v3)
				assert.Equal(t, err1 == nil, err3 == nil)
				assert.Equal(t, []replayTold{{meta: idem.CallMeta{Origin: origin(1)}}}, h.replays())
				assert.Equal(t, []replayTold{{meta: idem.CallMeta{Origin: origin(1)}}}, h2.replays())
				assert.Equal(t, 1, h.origins, "asked once: by the call that ran")
				assert.Zero(t, h2.origins)
			})
		}
	}
	t.Run("a duplicate that waited", func(t *testing.T) {
		clock := newFakeClock(false)
		st := memstore.New(memstore.WithClock(clock.Now))
		var h originHook
		ex := idem.NewExecutor(st, idem.WithCallHook(&h), idem.WithClock(clock), idem.SingleTenant())
		wm := &idem.Method{Op: "T.M", TTL: time.Minute, Wait: 10 * time.Second}
		started, release := make(chan struct{}), make(chan struct{})
		first := make(chan error)
		go func() {
			_, err := call(t.Context(), ex, wm, "a", func(context.Context) (int, error) {
				close(started)
				<-release
				return 7, nil
			})
			first <- err
		}()
		<-started // the first call holds the key and runs its method
		second := make(chan error)
		go func() {
			v, err := call(t.Context(), ex, wm, "a", ok)
			if err == nil && v != 7 {
				err = fmt.Errorf("replayed %d", v)
			}
			second <- err
		}()
		clock.WaitSleepers(t, 1)
		close(release)
		require.NoError(t, <-first)
		clock.Advance(time.Second)
		require.NoError(t, <-second)
		assert.Equal(t, []replayTold{{meta: idem.CallMeta{Origin: origin(1)}}}, h.replays())
	})
}

// parsedMeta is ParseMeta(meta), which must parse.
func parsedMeta(t *testing.T, meta []byte) idem.CallMeta {
	t.Helper()
	m, err := idem.ParseMeta(meta)
	require.NoError(t, err)
	return m
}

func mustKey(t *testing.T, id string) idem.Key {
	t.Helper()
	var k idem.KeyParts
	k.String("id", id)
	key, err := k.Key("", "T.M")
	require.NoError(t, err)
	return key
}

// TestOriginNotKept: what stores no origin, and a replay of a record that
// has none or whose Meta cannot be read: the replay goes on, and the
// observer is told.
func TestOriginNotKept(t *testing.T) {
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	ok := func(context.Context) (int, error) { return 7, nil }
	t.Run("an observer that is no OriginObserver", func(t *testing.T) {
		st := memstore.New()
		ex := idem.NewExecutor(st, idem.WithCallHook(&hookLog{}), idem.SingleTenant())
		_, err := call(t.Context(), ex, m, "a", ok)
		require.NoError(t, err)
		assert.Zero(t, parsedMeta(t, storedMeta(t, st, "a")).Origin, "no origin")
		// Replayed by an executor whose observer keeps origins: told none.
		var h originHook
		ex2 := idem.NewExecutor(st, idem.WithCallHook(&h), idem.SingleTenant())
		v, err := call(t.Context(), ex2, m, "a", ok)
		require.NoError(t, err)
		assert.Equal(t, 7, v)
		assert.Equal(t, []replayTold{{}}, h.replays())
	})
	t.Run("no hook", func(t *testing.T) {
		st := memstore.New()
		_, err := call(t.Context(), idem.NewExecutor(st, idem.SingleTenant()), m, "a", ok)
		require.NoError(t, err)
		assert.Zero(t, parsedMeta(t, storedMeta(t, st, "a")).Origin, "no origin")
	})
	t.Run("an invalid origin", func(t *testing.T) {
		st := memstore.New()
		h := originHook{zero: true}
		_, err := call(t.Context(), idem.NewExecutor(st, idem.WithCallHook(&h), idem.SingleTenant()), m, "a", ok)
		require.NoError(t, err)
		assert.Zero(t, parsedMeta(t, storedMeta(t, st, "a")).Origin, "no origin")
		assert.Equal(t, 1, h.origins)
	})
	t.Run("an outcome within MaxMetaLen of the limit is stored without it", func(t *testing.T) {
		// Exactly at the edge: originMeta's own test (callmeta_internal_test.go)
		// pins both sides of it without 64 MiB outcomes.
		n := idem.MaxOutcomeLen - idem.MaxMetaLen + 1
		st := memstore.New()
		var h originHook
		ex := idem.NewExecutor(st, idem.WithCallHook(&h), idem.WithCodec(rawCodec{}), idem.SingleTenant())
		body := make([]byte, n)
		_, err := call(t.Context(), ex, m, "a", func(context.Context) ([]byte, error) { return body, nil })
		require.NoError(t, err)
		e, err := st.Lookup(t.Context(), mustKey(t, "a"))
		require.NoError(t, err)
		assert.Equal(t, idem.StatusSucceeded, e.Status, "stored, not replaced by the not-stored outcome")
		assert.Len(t, e.Outcome.Body, n)
		assert.Empty(t, e.Outcome.Meta)
		assert.Equal(t, 1, h.origins)
	})
	t.Run("the not-stored substitute carries none", func(t *testing.T) {
		st := memstore.New()
		var h originHook
		ex := idem.NewExecutor(st, idem.WithCallHook(&h), idem.SingleTenant())
		_, err := call(t.Context(), ex, m, "a", func(context.Context) (float64, error) { return math.NaN(), nil })
		require.NoError(t, err)
		e, err := st.Lookup(t.Context(), mustKey(t, "a"))
		require.NoError(t, err)
		assert.Equal(t, idem.NotStoredCode, e.Outcome.ErrCode)
		assert.Empty(t, e.Outcome.Meta)
	})
	for _, c := range []struct {
		name string
		meta []byte
	}{
		{"a later version", append([]byte{9}, idem.CallMeta{Origin: origin(1)}.Append(nil)[1:]...)},
		{"damaged bytes", []byte{1, 1, 200}},
		{"someone else's bytes", []byte(`{"status":201}`)},
	} {
		t.Run("replay of "+c.name, func(t *testing.T) {
			st := memstore.New()
			key := mustKey(t, "a")
			var hs idem.Hasher
			hs.String("a")
			fp, err := hs.Sum()
			require.NoError(t, err)
			claim, err := st.Claim(t.Context(), idem.ClaimRequest{Key: key, Fingerprint: fp, Token: 9, Lease: time.Minute, TTL: time.Minute})
			require.NoError(t, err)
			require.True(t, claim.Claimed)
			require.NoError(t, st.Complete(t.Context(), key, 9, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("7"), Meta: c.meta}, time.Minute))
			var h originHook
			var events eventLog
			ex := idem.NewExecutor(st, idem.WithCallHook(&h), idem.WithObserver(events.observe), idem.SingleTenant())
			v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 0, errors.New("must not run") })
			require.NoError(t, err, "unreadable metadata never fails a replay")
			assert.Equal(t, 7, v)
			told := h.replays()
			require.Len(t, told, 1)
			assert.ErrorIs(t, told[0].err, idem.ErrUnreadableMeta)
			assert.Zero(t, told[0].meta)
			assert.Equal(t, []idem.EventKind{idem.EventReplayed}, events.kinds())
		})
	}
	t.Run("a result that no longer decodes is told its origin", func(t *testing.T) {
		st := memstore.New()
		var h originHook
		ex := idem.NewExecutor(st, idem.WithCallHook(&h), idem.SingleTenant())
		_, err := call(t.Context(), ex, m, "a", func(context.Context) (string, error) { return "seven", nil })
		require.NoError(t, err)
		_, err = call(t.Context(), ex, m, "a", ok) // int now: "seven" does not decode
		require.ErrorIs(t, err, idem.ErrUndecodable)
		assert.Equal(t, []replayTold{{meta: idem.CallMeta{Origin: origin(1)}}}, h.replays())
	})
}

// rawCodec stores a []byte result as it is, so that a test controls the
// outcome's length exactly.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = bytes.Clone(b)
	return nil
}
