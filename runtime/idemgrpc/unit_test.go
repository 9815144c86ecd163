package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"

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
		{errors.New("dial tcp: connection refused"), codes.Unavailable},
		{fmt.Errorf("idem: claim k: %w", context.DeadlineExceeded), codes.Unavailable},
		{fmt.Errorf("memstore: claim 00ff: %w", idem.ErrStoreFull), codes.ResourceExhausted},
		{fmt.Errorf("idem: op: %w", idem.ErrTooLarge), codes.InvalidArgument},
		{fmt.Errorf("x: %w", idem.ErrOutcomeNotStored), codes.Internal},
		{fmt.Errorf("x: %w", idem.ErrUndecodable), codes.Internal},
		{fmt.Errorf("x: %w", idem.ErrMisconfigured), codes.Internal},
	}
	for _, tc := range tests {
		if got := idemgrpc.StatusFor(tc.err).Code(); got != tc.want {
			t.Errorf("StatusFor(%v) = %v, want %v", tc.err, got, tc.want)
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
	pk, err := idem.NewKey("", "Echo.Do", "parent")
	if err != nil {
		t.Fatal(err)
	}
	parent := idem.ContextWithKey(context.Background(), pk)
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"own metadata kept", metadata.AppendToOutgoingContext(parent, idemgrpc.MetadataKey, "mine"), "mine"},
		{"WithKey verbatim", idemgrpc.WithKey(parent, "given"), "given"},
		{"derived inside an idempotent call", parent, idem.Derive(pk.Hex(), "grpc "+method)},
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
}
