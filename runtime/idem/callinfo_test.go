package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestCallInfo: a CallInfo says Replayed exactly when the call was answered
// with a stored outcome, in both modes and through a CallHook: a first run,
// a retry, a replayed final error, a conflict, one CallInfo reused for a
// run after a replay, and a nested call inside the method.
func TestCallInfo(t *testing.T) {
	errDeclined := errors.New("declined")
	m := idem.Method{Op: "billing.Service.Pay", TTL: time.Minute, Final: []idem.FinalError{{Name: "errDeclined", Err: errDeclined}}}
	inner := idem.Method{Op: "billing.Service.Log", TTL: time.Minute}
	for _, mode := range []string{"lease", "tx", "hook"} {
		t.Run(mode, func(t *testing.T) {
			var store idem.Store = memstore.New()
			opts := []idem.Option{idem.SingleTenant()}
			switch mode {
			case "tx":
				store = &txStore{faultStore: newFaultStore(nil)}
			case "hook":
				opts = append(opts, idem.WithCallHook(&hookLog{}))
			}
			ex := idem.NewExecutor(store, opts...)
			call := func(ctx context.Context, m *idem.Method, id, payload string, fn func(context.Context) (string, error)) (string, error) {
				var k idem.KeyParts
				k.String("id", id)
				var h idem.Hasher
				h.String(payload)
				return idem.Do(ctx, ex, m, &k, &h, fn)
			}
			ok := func(v string) func(context.Context) (string, error) {
				return func(context.Context) (string, error) { return v, nil }
			}
			ctx, info := idem.WithCallInfo(t.Context())
			assert.False(t, info.Replayed(), "before any call")

			_, err := call(ctx, &m, "A-1", "100", ok("r1"))
			require.NoError(t, err)
			assert.False(t, info.Replayed(), "the first run")

			v, err := call(ctx, &m, "A-1", "100", ok("r2"))
			require.NoError(t, err)
			assert.Equal(t, "r1", v)
			assert.True(t, info.Replayed(), "the retry")

			_, err = call(ctx, &m, "A-2", "100", ok("r3"))
			require.NoError(t, err)
			assert.False(t, info.Replayed(), "a run after a replay, with the same CallInfo")

			_, err = call(ctx, &m, "A-1", "999", ok("r4"))
			require.ErrorIs(t, err, idem.ErrPayloadMismatch)
			assert.False(t, info.Replayed(), "a conflict is no replay")

			declined := func(context.Context) (string, error) { return "", errDeclined }
			_, err = call(ctx, &m, "A-3", "100", declined)
			require.ErrorIs(t, err, errDeclined)
			assert.False(t, info.Replayed(), "a final error, first run")
			_, err = call(ctx, &m, "A-3", "100", declined)
			require.ErrorIs(t, err, errDeclined)
			assert.True(t, info.Replayed(), "a replayed final error")

			// A nested call, replayed, inside a method that runs: the
			// caller's CallInfo reports the outer call, and the method's
			// context still carries the outer call's key.
			_, err = call(t.Context(), &inner, "log-1", "x", ok("logged"))
			require.NoError(t, err)
			var outerKey, seenKey string
			_, err = call(ctx, &m, "A-4", "100", func(mctx context.Context) (string, error) {
				outerKey, _ = idem.KeyFrom(mctx)
				nctx, ninfo := idem.WithCallInfo(mctx)
				seenKey, _ = idem.KeyFrom(nctx)
				if _, err := call(nctx, &inner, "log-1", "x", ok("again")); err != nil {
					return "", err
				}
				if !ninfo.Replayed() {
					return "", errors.New("the nested call's own CallInfo missed its replay")
				}
				_, err := call(mctx, &inner, "log-1", "x", ok("again"))
				return "r5", err
			})
			require.NoError(t, err)
			assert.False(t, info.Replayed(), "the outer call ran; its nested call's replay is not its own")
			assert.NotEmpty(t, outerKey)
			assert.Equal(t, outerKey, seenKey, "KeyFrom sees through a CallInfo")
		})
	}
}

// TestCallInfoWaitedDuplicate: a duplicate that waits for the running call
// (Method.Wait) and gets its outcome is a replay; the call that ran is not.
func TestCallInfoWaitedDuplicate(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := idem.Method{Op: "billing.Service.Pay", TTL: time.Minute, Lease: 30 * time.Second, Wait: 30 * time.Second}
	started, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var firstInfo *idem.CallInfo
	wg.Go(func() {
		ctx, info := idem.WithCallInfo(t.Context())
		firstInfo = info
		var k idem.KeyParts
		k.String("id", "A-1")
		var h idem.Hasher
		_, err := idem.Do(ctx, ex, &m, &k, &h, func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
		assert.NoError(t, err)
	})
	<-started
	ctx, info := idem.WithCallInfo(t.Context())
	var k idem.KeyParts
	k.String("id", "A-1")
	var h idem.Hasher
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err := idem.Do(ctx, ex, &m, &k, &h, func(context.Context) (int, error) { return 2, nil })
		assert.NoError(t, err)
		assert.Equal(t, 1, v)
	}()
	close(release)
	<-done
	wg.Wait()
	assert.True(t, info.Replayed(), "the duplicate got the running call's outcome")
	assert.False(t, firstInfo.Replayed(), "the call that ran")
}
