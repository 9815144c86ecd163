package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// TestStatusFor: every error idem.Do stops a call with maps to its status,
// wrapped or not; anything else is Unavailable.
func TestStatusFor(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{idem.ErrPayloadMismatch, codes.FailedPrecondition},
		{fmt.Errorf("%w (key k)", idem.ErrPayloadMismatch), codes.FailedPrecondition},
		{&idem.InProgressError{}, codes.Aborted},
		{idem.ErrInProgress, codes.Aborted},
		{&idem.MissingKeyError{Op: "op", Path: "p"}, codes.InvalidArgument},
		{fmt.Errorf("idem: op: %w", idem.ErrMissingTenant), codes.Unauthenticated},
		{fmt.Errorf("idem: op: %w: a, b", idem.ErrTenantConflict), codes.PermissionDenied},
		{errors.New("dial tcp: connection refused"), codes.Unavailable},
		{fmt.Errorf("idem: claim k: %w", context.DeadlineExceeded), codes.Unavailable},
		{fmt.Errorf("memstore: claim 00ff: %w", idem.ErrStoreFull), codes.ResourceExhausted},
		{fmt.Errorf("pgstore: claim 00ff: %w", idem.ErrStoreBusy), codes.Unavailable},
		{fmt.Errorf("idem: op: %w", idem.ErrTooLarge), codes.InvalidArgument},
		{fmt.Errorf("x: %w", idem.ErrOutcomeNotStored), codes.Internal},
		{fmt.Errorf("x: %w", idem.ErrUndecodable), codes.Internal},
		{fmt.Errorf("x: %w", idem.ErrMisconfigured), codes.Internal},
		// What idem.Do returns when the store failed before the method ran.
		{fmt.Errorf("idem: op: claim: %w: %w", idem.ErrStoreUnavailable, errors.New("dial tcp: connection refused")), codes.Unavailable},
		{fmt.Errorf("idem: op: claim: %w: %w", idem.ErrStoreUnavailable, idem.ErrStoreSchema), codes.Unavailable},
		{fmt.Errorf("idem: op: claim: %w: %w", idem.ErrStoreUnavailable, idem.ErrStoreFull), codes.ResourceExhausted},
	}
	for _, tc := range tests {
		st := idemgrpc.StatusFor(tc.err)
		if got := st.Code(); got != tc.want {
			t.Errorf("StatusFor(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if reason, ok := idemgrpc.Refusal(st.Err()); !ok || reason == "" {
			t.Errorf("StatusFor(%v) carries no ErrorInfo of %s", tc.err, idemgrpc.ErrorDomain)
		}
	}
}

// TestStoreDown: a store that cannot be reached (a real Redis client aimed
// at a closed port) answers Unavailable, and the handler does not run.
func TestStoreDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	svc := &echo{}
	cc := serve(t, bufconnT, svc, []grpc.UnaryServerInterceptor{interceptor(redisstore.New(c))})
	r := call(t.Context(), cc, newKey(), "x")
	if st := status.Convert(r.err); st.Code() != codes.Unavailable {
		t.Errorf("store down: %v %q, want Unavailable", st.Code(), st.Message())
	}
	if svc.runs.Load() != 0 {
		t.Error("handler ran without a claim")
	}
}

// TestResponseTooLarge: a response over WithMaxResponse reaches the client
// but is not stored: the retry runs the handler again.
func TestResponseTooLarge(t *testing.T) {
	svc := &echo{}
	cc := serve(t, bufconnT, svc, []grpc.UnaryServerInterceptor{interceptor(memstore.New(), idemgrpc.WithMaxResponse(4))})
	key := newKey()
	for i := range 2 {
		if r := call(t.Context(), cc, key, "a long response"); r.err != nil || r.replayed {
			t.Fatalf("call %d: %v (replayed %v)", i, r.err, r.replayed)
		}
	}
	if got := svc.runs.Load(); got != 2 {
		t.Errorf("handler ran %d times, want 2 (not stored)", got)
	}
}

// TestClientKey: the client interceptor's choice of key, case by case.
func TestClientKey(t *testing.T) {
	const method = "/test.Echo/Do"
	fresh := func() string { return "fresh" }
	// parent is the context of a running idempotent call, as the executor
	// makes it.
	var parent context.Context
	var parts idem.KeyParts
	parts.String("order", "o-1")
	if _, err := idem.Do(context.Background(), idem.NewExecutor(memstore.New(), idem.SingleTenant()), &idem.Method{Op: "parent", TTL: time.Minute},
		&parts, &idem.Hasher{}, func(ctx context.Context) (int, error) { parent = ctx; return 0, nil }); err != nil {
		t.Fatal(err)
	}
	parentKey, ok := idem.KeyFrom(parent)
	if !ok || parentKey == "" {
		t.Fatal("no key in the context of an idempotent call")
	}
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"own metadata kept", metadata.AppendToOutgoingContext(parent, idemgrpc.MetadataKey, "mine"), "mine"},
		{"ContextWithOutgoingKey verbatim", idemgrpc.ContextWithOutgoingKey(parent, "given"), "given"},
		{"derived inside an idempotent call", parent, idem.Derive(parentKey, "grpc "+method)},
		{"fresh otherwise", context.Background(), "fresh"},
	}
	icpt := idemgrpc.UnaryClientInterceptor(idemgrpc.WithKeyFunc(fresh))
	for _, tc := range tests {
		var got []string
		invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			got = md.Get(idemgrpc.MetadataKey)
			return nil
		}
		if err := icpt(tc.ctx, method, nil, nil, nil, invoker); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: sent %q, want %q", tc.name, got, tc.want)
		}
	}
	// A method the selector leaves out gets no key.
	icpt = idemgrpc.UnaryClientInterceptor(idemgrpc.WithClientMethods(func(string) bool { return false }))
	_ = icpt(context.Background(), method, nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(idemgrpc.MetadataKey)) != 0 {
			t.Error("unselected method got a key")
		}
		return nil
	})
}

// TestObserver: each of the interceptor's own outcomes is reported once,
// with its kind and code.
func TestObserver(t *testing.T) {
	var mu sync.Mutex
	var evs []idemgrpc.Event
	observe := func(ev idemgrpc.Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }
	svc := &echo{}
	store := memstore.New()
	cc := serve(t, bufconnT, svc, []grpc.UnaryServerInterceptor{interceptor(store, idemgrpc.WithObserver(observe))})
	small := serve(t, bufconnT, svc, []grpc.UnaryServerInterceptor{interceptor(store, idemgrpc.WithObserver(observe), idemgrpc.WithMaxResponse(1))})
	key := newKey()
	steps := []struct {
		do   func()
		kind idemgrpc.EventKind
		code codes.Code
	}{
		{func() { call(t.Context(), cc, "", "x") }, idemgrpc.EventKeyMissing, codes.InvalidArgument},
		{func() { call(t.Context(), cc, `"bad`, "x") }, idemgrpc.EventKeyInvalid, codes.InvalidArgument},
		{func() { call(t.Context(), cc, key, "x") }, 0, 0}, // first run: nothing of the interceptor's own
		{func() { call(t.Context(), cc, key, "x") }, idemgrpc.EventReplayed, codes.OK},
		{func() { call(t.Context(), cc, key, "y") }, idemgrpc.EventConflict, codes.FailedPrecondition},
		{func() { call(t.Context(), cc, newKey(), "fail:Internal") }, idemgrpc.EventNotStored, codes.Internal},
		{func() { call(t.Context(), small, newKey(), "x") }, idemgrpc.EventResponseTooLarge, codes.OK},
	}
	for i, st := range steps {
		mu.Lock()
		evs = nil
		mu.Unlock()
		st.do()
		mu.Lock()
		got := evs
		mu.Unlock()
		if st.kind == 0 {
			if len(got) != 0 {
				t.Errorf("step %d: events %+v, want none", i, got)
			}
			continue
		}
		if len(got) != 1 || got[0].Kind != st.kind || got[0].Code != st.code || got[0].FullMethod != methodDo {
			t.Errorf("step %d: events %+v, want one %v with %v", i, got, st.kind, st.code)
		}
	}
	if s := idemgrpc.EventInProgress.String(); s != "in_progress" {
		t.Errorf("EventInProgress.String() = %q", s)
	}
	if s := idemgrpc.EventTenantMissing.String(); s != "tenant_missing" {
		t.Errorf("EventTenantMissing.String() = %q", s)
	}
}

// TestInvalidOptionsPanic: a missing tenancy, a nil executor and every
// invalid option make UnaryServerInterceptor panic with a message naming
// it; a nil option or function makes UnaryClientInterceptor panic.
func TestInvalidOptionsPanic(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	single := idemgrpc.SingleTenant()
	for _, c := range []struct {
		name string
		opts []idemgrpc.Option
	}{
		{"UnaryServerInterceptor: no tenancy chosen: pass WithTenant(f)", nil},
		{"no tenancy chosen", []idemgrpc.Option{idemgrpc.WithTTL(time.Minute)}},
		{"WithTenant and SingleTenant both given", []idemgrpc.Option{single, idemgrpc.WithTenant(func(context.Context) string { return "t" })}},
		{"WithTenant(nil)", []idemgrpc.Option{idemgrpc.WithTenant(nil)}},
		{"WithTTL(0s)", []idemgrpc.Option{single, idemgrpc.WithTTL(0)}},
		{"WithLease(-1s)", []idemgrpc.Option{single, idemgrpc.WithLease(-time.Second)}},
		{"WithLease(2m0s) exceeds the TTL, 1m0s (WithTTL)", []idemgrpc.Option{single, idemgrpc.WithLease(2 * time.Minute), idemgrpc.WithTTL(time.Minute)}},
		{"WithWait(-1s)", []idemgrpc.Option{single, idemgrpc.WithWait(-time.Second)}},
		{"WithMaxRetryAfter(0s)", []idemgrpc.Option{single, idemgrpc.WithMaxRetryAfter(0)}},
		{"WithMaxResponse(0)", []idemgrpc.Option{single, idemgrpc.WithMaxResponse(0)}},
		{"WithHandlerTimeout(0s)", []idemgrpc.Option{single, idemgrpc.WithHandlerTimeout(0)}},
		{"WithExpectedRun(0s)", []idemgrpc.Option{single, idemgrpc.WithExpectedRun(0)}},
		{"WithLogger(nil)", []idemgrpc.Option{single, idemgrpc.WithLogger(nil)}},
		{"WithMethods(nil)", []idemgrpc.Option{single, idemgrpc.WithMethods(nil)}},
		{"WithFingerprint(nil)", []idemgrpc.Option{single, idemgrpc.WithFingerprint(nil)}},
		{"WithPolicy(nil)", []idemgrpc.Option{single, idemgrpc.WithPolicy(nil)}},
		{"WithObserver(nil)", []idemgrpc.Option{single, idemgrpc.WithObserver(nil)}},
		{"a nil Option", []idemgrpc.Option{single, nil}},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantPanic(t, c.name, func() { idemgrpc.UnaryServerInterceptor(ex, c.opts...) })
		})
	}
	wantPanic(t, "the executor is nil", func() { idemgrpc.UnaryServerInterceptor(nil, single) })
	wantPanic(t, "WithKeyFunc(nil)", func() { idemgrpc.UnaryClientInterceptor(idemgrpc.WithKeyFunc(nil)) })
	wantPanic(t, "WithClientMethods(nil)", func() { idemgrpc.UnaryClientInterceptor(idemgrpc.WithClientMethods(nil)) })
	wantPanic(t, "a nil ClientOption", func() { idemgrpc.UnaryClientInterceptor(nil) })
	// Valid edge values are accepted.
	idemgrpc.UnaryServerInterceptor(ex, single, idemgrpc.WithTTL(time.Minute), idemgrpc.WithLease(time.Minute),
		idemgrpc.WithWait(0), idemgrpc.WithMaxResponse(1), idemgrpc.WithMaxRetryAfter(time.Second))
}

func wantPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		msg, _ := recover().(string)
		if !strings.HasPrefix(msg, "idemgrpc: ") || !strings.Contains(msg, want) {
			t.Errorf("panicked with %q, want a message naming %s", msg, want)
		}
	}()
	f()
}
