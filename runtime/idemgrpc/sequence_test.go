package idemgrpc_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgen/idemgen/runtime/idemgrpc"
)

// keyLog is a client interceptor, chained after idemgrpc's, that records
// the idempotency-key of every outgoing call.
type keyLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *keyLog) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	l.mu.Lock()
	l.keys = append(l.keys, md.Get(idemgrpc.MetadataKey)...)
	l.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (l *keyLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys
	l.keys = nil
	return k
}

// testDownstreamSequence (issue 35, class 6): a handler that calls one
// downstream method several times derives a key of its own for each call,
// so that two identical calls are two effects (not one replayed) and two
// different calls are not refused as a reused key; a retry of the upstream
// call derives the same keys in the same order, so every downstream call is
// replayed, not run again; and a handler that retries a downstream call by
// calling again (after a status a retry may fix) sends the same key again.
func testDownstreamSequence(t *testing.T, tr transport, newStore newStoreFunc) {
	store := newStore(t)
	var flaky atomic.Int64
	effects := map[string]int{}
	var mu sync.Mutex
	down := &echo{reply: func(ctx context.Context, req string) (string, error) {
		if req == "flaky" && flaky.Add(1) == 1 {
			return "", status.Error(codes.Unavailable, "a transient failure")
		}
		mu.Lock()
		defer mu.Unlock()
		effects[req]++
		return req + " done", nil
	}}
	log := &keyLog{}
	ccDown := serve(t, tr, down, []grpc.UnaryServerInterceptor{interceptor(store)},
		grpc.WithChainUnaryInterceptor(idemgrpc.UnaryClientInterceptor(), log.intercept))
	var upRuns atomic.Int64
	up := &echo{reply: func(ctx context.Context, _ string) (string, error) {
		for _, req := range []string{"charge 5", "charge 5", "refund 5", "flaky"} {
			for attempt := 1; ; attempt++ {
				err := ccDown.Invoke(ctx, methodDo, wrapperspb.String(req), new(wrapperspb.StringValue))
				if status.Code(err) == codes.Unavailable && attempt < 3 {
					continue // the handler retries by calling again
				}
				if err != nil {
					return "", err
				}
				break
			}
		}
		if upRuns.Add(1) == 1 {
			return "", status.Error(codes.Unavailable, "the upstream failed after its downstream calls")
		}
		return "ok", nil
	}}
	cc := serve(t, tr, up, []grpc.UnaryServerInterceptor{interceptor(store)})
	key := newKey()
	if r := call(t.Context(), cc, key, "order"); status.Code(r.err) != codes.Unavailable {
		t.Fatalf("first attempt: %v, want Unavailable", r.err)
	}
	first := log.take()
	if r := call(t.Context(), cc, key, "order"); r.err != nil {
		t.Fatalf("retry: %v", r.err)
	}
	second := log.take()

	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{"charge 5": 2, "refund 5": 1, "flaky": 1}; !maps(effects, want) {
		t.Errorf("downstream effects %v, want %v (two charges, each downstream call once across the upstream's retry)", effects, want)
	}
	// First attempt: charge, charge, refund, flaky (Unavailable), flaky again.
	if len(first) != 5 || first[0] == first[1] || first[1] == first[2] || first[0] == first[2] ||
		first[3] != first[4] || slices.Contains(first[:3], first[3]) {
		t.Errorf("first attempt's downstream keys %q: want three distinct keys, then one key sent twice (the handler's retry)", first)
	}
	// The retry: the same keys in the same order (flaky is replayed at once).
	if len(second) != 4 || !slices.Equal(second, first[:4]) {
		t.Errorf("retry's downstream keys %q, want the first attempt's %q", second, first[:4])
	}
}

func maps(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
