package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
)

// hookLog is a CallHook that records what it is told, one line each, and
// checks that every context it is handed descends from the one StartCall
// returned.
type hookLog struct {
	mu    sync.Mutex
	lines []string
}

type hookCtxKey struct{}

func (h *hookLog) add(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, fmt.Sprintf(format, args...))
}

func (h *hookLog) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lines)
}

func errText(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, idem.ErrCallAborted):
		return "aborted"
	}
	return "error"
}

func (h *hookLog) StartCall(ctx context.Context, m *idem.Method, _ time.Time) (context.Context, idem.CallObserver) {
	h.add("start %s", m.Op)
	return context.WithValue(ctx, hookCtxKey{}, "call"), &hookCall{h}
}

type hookCall struct{ h *hookLog }

func inCall(ctx context.Context) string {
	if ctx.Value(hookCtxKey{}) == "call" {
		return ""
	}
	return " OUTSIDE THE CALL'S CONTEXT"
}

func (c *hookCall) Event(ev idem.Event) { c.h.add("event %s", ev.Kind) }

func (c *hookCall) Method(ctx context.Context, _ time.Time) (context.Context, func(time.Time, error)) {
	c.h.add("method%s", inCall(ctx))
	return context.WithValue(ctx, hookCtxKey{}, "method"), func(_ time.Time, err error) { c.h.add("method %s", errText(err)) }
}

func (c *hookCall) StoreOp(ctx context.Context, op string, _ time.Time) (context.Context, func(time.Time, error)) {
	c.h.add("store %s%s", op, inCall(ctx))
	return ctx, func(_ time.Time, err error) { c.h.add("store %s %s", op, errText(err)) }
}

func (c *hookCall) Wait(time.Time, time.Duration) { c.h.add("wait") }

func (c *hookCall) End(_ time.Time, err error) { c.h.add("end %s", errText(err)) }

// TestCallHook: the hook sees each call from start to end, the method in a
// context of its own, every store operation (lease and transactional
// modes, renewals, the release after a panic) in the call's context, and
// each wait.
func TestCallHook(t *testing.T) {
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	ok := func(ctx context.Context) (int, error) {
		if ctx.Value(hookCtxKey{}) != "method" {
			return 0, errors.New("the method does not run in the hook's method context")
		}
		return 1, nil
	}
	t.Run("lease mode", func(t *testing.T) {
		var h hookLog
		ex := idem.NewExecutor(newFaultStore(nil), idem.WithCallHook(&h), idem.SingleTenant())
		_, err := call(t.Context(), ex, m, "a", ok)
		require.NoError(t, err)
		_, err = call(t.Context(), ex, m, "a", ok)
		require.NoError(t, err)
		assert.Equal(t, []string{
			"start T.M", "store claim", "store claim ok", "event claimed", "method", "method ok",
			"store complete", "store complete ok", "event completed", "end ok",
			"start T.M", "store claim", "store claim ok", "event replayed", "end ok",
		}, h.list())
	})
	t.Run("transactional mode", func(t *testing.T) {
		var h hookLog
		ex := idem.NewExecutor(&txStore{faultStore: newFaultStore(nil)}, idem.WithCallHook(&h), idem.SingleTenant())
		_, err := call(t.Context(), ex, m, "a", ok)
		require.NoError(t, err)
		_, err = call(t.Context(), ex, m, "b", func(context.Context) (int, error) { return 0, errors.New("transient") })
		require.Error(t, err)
		assert.Equal(t, []string{
			"start T.M", "store claim_tx", "store claim_tx ok", "event claimed", "method", "method ok",
			"store commit", "store commit ok", "event completed", "end ok",
			"start T.M", "store claim_tx", "store claim_tx ok", "event claimed", "method", "method error",
			"store rollback", "store rollback ok", "event released", "end error",
		}, h.list())
	})
	t.Run("panic", func(t *testing.T) {
		var h hookLog
		ex := idem.NewExecutor(newFaultStore(nil), idem.WithCallHook(&h), idem.SingleTenant())
		assert.PanicsWithValue(t, "boom", func() {
			_, _ = call(t.Context(), ex, m, "a", func(context.Context) (int, error) { panic("boom") })
		})
		assert.Equal(t, []string{
			"start T.M", "store claim", "store claim ok", "event claimed", "method", "method aborted",
			"store release", "store release ok", "event released", "end aborted",
		}, h.list())
	})
	t.Run("wait", func(t *testing.T) {
		var h hookLog
		clock := newFakeClock(true)
		st := newFaultStore(clock)
		ex := idem.NewExecutor(st, idem.WithCallHook(&h), idem.WithClock(clock), idem.SingleTenant())
		wm := &idem.Method{Op: "T.M", TTL: time.Minute, Wait: 10 * time.Millisecond}
		// Another process holds the key for its whole lease.
		var k idem.KeyParts
		k.String("id", "a")
		key, err := k.Key("", "T.M")
		require.NoError(t, err)
		var hs idem.Hasher
		hs.String("a")
		fp, err := hs.Sum()
		require.NoError(t, err)
		_, err = st.Store.Claim(t.Context(), idem.ClaimRequest{Key: key, Fingerprint: fp, Token: 9, Lease: time.Minute, TTL: time.Minute})
		require.NoError(t, err)
		_, err = call(t.Context(), ex, wm, "a", ok)
		var ip *idem.InProgressError
		require.ErrorAs(t, err, &ip)
		lines := h.list()
		assert.Equal(t, []string{"start T.M", "store claim", "store claim ok", "wait"}, lines[:4])
		assert.Equal(t, []string{"store claim", "store claim ok", "event in_progress", "end error"}, lines[len(lines)-4:])
		waits := 0
		for _, l := range lines {
			if l == "wait" {
				waits++
			}
		}
		assert.Equal(t, waits+1, strings.Count(strings.Join(lines, "\n"), "store claim ok"), "a claim after each wait")
	})
	t.Run("renewal", func(t *testing.T) {
		var h hookLog
		clock := newFakeClock(false)
		st := newFaultStore(clock)
		ex := idem.NewExecutor(st, idem.WithCallHook(&h), idem.WithClock(clock), idem.WithRenewal(true), idem.WithLease(30*time.Second), idem.SingleTenant())
		started, finish := make(chan struct{}), make(chan struct{})
		res := make(chan error, 1)
		go func() {
			_, err := call(t.Context(), ex, m, "a", func(ctx context.Context) (int, error) {
				close(started)
				<-finish
				return ok(ctx)
			})
			res <- err
		}()
		<-started
		clock.WaitSleepers(t, 1)
		clock.Advance(10 * time.Second)
		st.waitRenewals(t, 1)
		clock.WaitSleepers(t, 1) // the renewal reported and sleeps again
		close(finish)
		require.NoError(t, <-res)
		assert.Equal(t, []string{
			"start T.M", "store claim", "store claim ok", "event claimed", "method",
			"store renew", "store renew ok", "event renewed",
			"method ok", "store complete", "store complete ok", "event completed", "end ok",
		}, h.list())
	})
	t.Run("nil", func(t *testing.T) {
		assert.PanicsWithValue(t, "idem: WithCallHook(nil)", func() { idem.NewExecutor(newFaultStore(nil), idem.WithCallHook(nil), idem.SingleTenant()) })
	})
}

// TestLogEventsKeys: LogEvents logs the key's hex ID, never its text or
// tenant; LogEventsWithKeys logs them too.
func TestLogEventsKeys(t *testing.T) {
	key, err := idem.NewKey("tenant-alice", "T.M", "alice@example.com")
	require.NoError(t, err)
	ev := idem.Event{Kind: idem.EventReplayed, Key: key}
	logged := func(f func(*slog.Logger) func(idem.Event)) string {
		var buf bytes.Buffer
		f(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))(ev)
		return buf.String()
	}
	plain := logged(idem.LogEvents)
	assert.Contains(t, plain, "key_id="+key.Hex())
	assert.Contains(t, plain, "op=T.M")
	assert.NotContains(t, plain, "alice")
	with := logged(idem.LogEventsWithKeys)
	assert.Contains(t, with, "tenant=tenant-alice")
	assert.Contains(t, with, "alice@example.com")
}
