package idem_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// events records what an executor's observer is told.
type events struct {
	mu    sync.Mutex
	kinds []idem.EventKind
}

func (e *events) observe(ev idem.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kinds = append(e.kinds, ev.Kind)
}

func (e *events) list() []idem.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]idem.EventKind(nil), e.kinds...)
}

func call[T any](ctx context.Context, ex *idem.Executor, m *idem.Method, id string, fn func(context.Context) (T, error)) (T, error) {
	var k idem.KeyParts
	k.String("id", id)
	var h idem.Hasher
	h.String(id)
	return idem.Do(ctx, ex, m, &k, &h, fn)
}

func TestDoEvents(t *testing.T) {
	var ev events
	ex := idem.NewExecutor(memstore.New(), idem.WithObserver(ev.observe), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	ok := func(context.Context) (int, error) { return 1, nil }
	_, err := call(t.Context(), ex, m, "a", ok)
	require.NoError(t, err)
	_, err = call(t.Context(), ex, m, "a", ok)
	require.NoError(t, err)
	_, err = call(t.Context(), ex, m, "b", func(context.Context) (int, error) { return 0, errors.New("transient") })
	require.Error(t, err)
	assert.Equal(t, []idem.EventKind{
		idem.EventClaimed, idem.EventCompleted,
		idem.EventReplayed,
		idem.EventClaimed, idem.EventReleased,
	}, ev.list())
}

func TestDoPutsKeyInContext(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	got, err := call(t.Context(), ex, m, "a", func(ctx context.Context) (string, error) {
		k, ok := idem.KeyFrom(ctx)
		if !ok {
			return "", errors.New("no key in context")
		}
		return idem.Derive(k, "downstream"), nil
	})
	require.NoError(t, err)
	key, err := idem.NewKey("", "T.M", "a")
	require.NoError(t, err)
	assert.Equal(t, idem.Derive(key.Hex(), "downstream"), got, "KeyFrom is the record key's hex ID")
	again, err := call(t.Context(), ex, m, "a", func(context.Context) (string, error) { return "other", nil })
	require.NoError(t, err)
	assert.Equal(t, got, again)
}

func TestDoInProgress(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.WithLease(10*time.Second), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = call(t.Context(), ex, m, "a", func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
	}()
	<-started
	defer close(release)
	_, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 2, nil })
	require.ErrorIs(t, err, idem.ErrInProgress)
	var ip *idem.InProgressError
	require.ErrorAs(t, err, &ip)
	assert.Greater(t, ip.RetryAfter, 9*time.Second, "RetryAfter is the time left on the lease")
	assert.LessOrEqual(t, ip.RetryAfter, 10*time.Second)
	want, err := idem.NewKey("", "T.M", "a")
	require.NoError(t, err)
	assert.Equal(t, want, ip.Key, "the key is whole, its Text too, although memstore is given none")
	assert.NotContains(t, ip.Error(), "a)", "the message names the key by its ID, not its text")
	assert.Contains(t, ip.Error(), want.Hex())
}

func TestDoWaitsThenReplays(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute, Wait: 2 * time.Second}
	var runs atomic.Int32
	fn := func(context.Context) (int, error) {
		runs.Add(1)
		time.Sleep(50 * time.Millisecond)
		return 7, nil
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			v, err := call(t.Context(), ex, m, "a", fn)
			assert.NoError(t, err)
			assert.Equal(t, 7, v)
		})
	}
	wg.Wait()
	assert.Equal(t, int32(1), runs.Load())
}

func TestDoWaitGivesUp(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute, Wait: 30 * time.Millisecond}
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = call(t.Context(), ex, m, "a", func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
	}()
	<-started
	defer close(release)
	begin := time.Now()
	_, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 2, nil })
	assert.ErrorIs(t, err, idem.ErrInProgress)
	assert.GreaterOrEqual(t, time.Since(begin), 30*time.Millisecond, "waits for the whole inflight wait")
}

func TestDoCancelledContextReleases(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	ctx, cancel := context.WithCancel(t.Context())
	_, err := call(ctx, ex, m, "a", func(ctx context.Context) (int, error) {
		cancel()
		return 0, ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 3, nil })
	require.NoError(t, err, "a cancelled call released its key")
	assert.Equal(t, 3, v)
}

func TestDoStoresOutcomeAfterCallerGaveUp(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	ctx, cancel := context.WithCancel(t.Context())
	_, err := call(ctx, ex, m, "a", func(context.Context) (int, error) {
		cancel() // the client went away, but the method finished its work
		return 4, nil
	})
	require.NoError(t, err)
	v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 5, nil })
	require.NoError(t, err)
	assert.Equal(t, 4, v, "the outcome was stored although the caller's context was cancelled")
}

func TestDoMissingKeyDoesNotCall(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	called := false
	_, err := call(t.Context(), ex, m, "", func(context.Context) (int, error) { called = true; return 1, nil })
	assert.ErrorIs(t, err, idem.ErrMissingKey)
	assert.False(t, called)
}

func TestDoTenantScoping(t *testing.T) {
	type tenantKey struct{}
	ex := idem.NewExecutor(memstore.New(), idem.WithTenant(func(ctx context.Context) string {
		s, _ := ctx.Value(tenantKey{}).(string)
		return s
	}))
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	runs := 0
	fn := func(context.Context) (int, error) { runs++; return runs, nil }
	a, _ := call(context.WithValue(t.Context(), tenantKey{}, "acme"), ex, m, "k", fn)
	b, _ := call(context.WithValue(t.Context(), tenantKey{}, "globex"), ex, m, "k", fn)
	assert.Equal(t, 1, a)
	assert.Equal(t, 2, b, "the same key under another tenant is another record")
}

// flakyStore fails the first n Complete calls of a real memstore.
type flakyStore struct {
	*memstore.Store
	fail atomic.Int32
}

func (f *flakyStore) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if f.fail.Add(-1) >= 0 {
		return errors.New("store unavailable")
	}
	return f.Store.Complete(ctx, key, token, out, ttl)
}

func TestDoRetriesComplete(t *testing.T) {
	fs := &flakyStore{Store: memstore.New()}
	fs.fail.Store(2)
	var ev events
	ex := idem.NewExecutor(fs, idem.WithObserver(ev.observe), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 9, nil })
	require.NoError(t, err)
	assert.Equal(t, 9, v)
	assert.Equal(t, []idem.EventKind{idem.EventClaimed, idem.EventStoreRetry, idem.EventStoreRetry, idem.EventCompleted}, ev.list())
	v, err = call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 10, nil })
	require.NoError(t, err)
	assert.Equal(t, 9, v, "the outcome was stored on the third attempt")
}

func TestDoCompleteGivesUp(t *testing.T) {
	fs := &flakyStore{Store: memstore.New()}
	fs.fail.Store(100)
	var ev events
	ex := idem.NewExecutor(fs, idem.WithObserver(ev.observe), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	v, err := call(t.Context(), ex, m, "a", func(context.Context) (int, error) { return 9, nil })
	require.NoError(t, err, "the method ran: its caller gets its result")
	assert.Equal(t, 9, v)
	assert.Contains(t, ev.list(), idem.EventStoreError, "and the observer is told the outcome was not stored")
}

// keyTextStore records the Key.Text of each claim it passes on; local says
// whether it is a LocalStore.
type keyTextStore struct {
	idem.Store
	local bool
	mu    sync.Mutex
	texts []string
}

func (s *keyTextStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	s.mu.Lock()
	s.texts = append(s.texts, req.Key.Text)
	s.mu.Unlock()
	return s.Store.Claim(ctx, req)
}

func (s *keyTextStore) Local() bool { return s.local }

// TestKeyTextWhereRead: the executor builds Key.Text where it can be read:
// for a store that is not local, and for observers; a LocalStore without
// observers gets keys without it.
func TestKeyTextWhereRead(t *testing.T) {
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	for _, tc := range []struct {
		name     string
		local    bool
		observed bool
		want     string
	}{
		{"remote store", false, false, "k"},
		{"local store", true, false, ""},
		{"local store, observed", true, true, "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &keyTextStore{Store: memstore.New(), local: tc.local}
			opts := []idem.Option{idem.SingleTenant()}
			var ev events
			if tc.observed {
				opts = append(opts, idem.WithObserver(ev.observe))
			}
			ex := idem.NewExecutor(st, opts...)
			_, err := call(t.Context(), ex, m, "k", func(context.Context) (int, error) { return 1, nil })
			require.NoError(t, err)
			assert.Equal(t, []string{tc.want}, st.texts)
		})
	}
}
