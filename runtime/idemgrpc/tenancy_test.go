package idemgrpc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
)

// tenantFromMD names the tenant a test client sends in its "tenant"
// metadata (what an authentication interceptor would have read).
func tenantFromMD(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("tenant"); len(v) == 1 {
		return v[0]
	}
	return ""
}

// testTenantReachesWrapper (issue 33, class 1, for the gRPC door): the
// interceptor's tenant reaches a wrapper (idem.Do) called inside the
// handler, whatever tenancy the wrapper's executor was built with. Two
// tenants pay their own order 1 (same business key, same request) under
// their own idempotency-keys: each gets its own receipt and its own run;
// none is answered with the other's outcome. And the client interceptor
// carries the tenant downstream through the key it derives: the same
// idempotency-key sent by both tenants reaches a single-tenant downstream
// service as two different keys.
func testTenantReachesWrapper(t *testing.T, tr transport, newStore newStoreFunc) {
	store := newStore(t)
	wirings := []struct {
		name string
		ex   *idem.Executor
	}{
		{"SingleTenant executor", idem.NewExecutor(store, idem.SingleTenant())},
		{"WithTenant executor naming none", idem.NewExecutor(store, idem.WithTenant(func(context.Context) string { return "" }))},
		{"WithTenant executor reading the door", idem.NewExecutor(store, idem.WithTenant(func(ctx context.Context) string {
			t, _ := idem.TenantFromContext(ctx)
			return t
		}))},
	}
	for i, w := range wirings {
		t.Run(w.name, func(t *testing.T) {
			m := idem.Method{Op: "test.Pay/" + newKey(), TTL: time.Hour}
			var mu sync.Mutex
			runs := map[string]int{}
			svc := &echo{reply: func(ctx context.Context, order string) (string, error) {
				var k idem.KeyParts
				k.String("order", order)
				var h idem.Hasher
				h.String(order)
				return idem.Do(ctx, w.ex, &m, &k, &h, func(ctx context.Context) (string, error) {
					tenant, _ := idem.TenantFromContext(ctx)
					mu.Lock()
					defer mu.Unlock()
					runs[tenant]++
					return "receipt of " + tenant + " for " + order, nil
				})
			}}
			cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{
				idemgrpc.UnaryServerInterceptor(idem.NewExecutor(store, idem.SingleTenant()), idemgrpc.WithTenant(tenantFromMD))})
			for _, tenant := range []string{"acme", "globex", "acme"} {
				ctx := metadata.AppendToOutgoingContext(t.Context(), "tenant", tenant)
				r := call(ctx, cc, newKey(), "order-1")
				if r.err != nil {
					t.Fatalf("%s: %v", tenant, r.err)
				}
				if want := "receipt of " + tenant + " for order-1"; r.resp.GetValue() != want {
					t.Errorf("wiring %d: tenant %s was answered %q, want %q", i, tenant, r.resp.GetValue(), want)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if runs["acme"] != 1 || runs["globex"] != 1 || len(runs) != 2 {
				t.Errorf("wrapped method runs per tenant %v, want acme 1, globex 1 (the second acme call replays)", runs)
			}
		})
	}

	t.Run("client interceptor downstream", func(t *testing.T) {
		down := &echo{}
		ccDown := serve(t, tr, down, []grpc.UnaryServerInterceptor{interceptor(store)},
			grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
		up := &echo{reply: func(ctx context.Context, req string) (string, error) {
			resp := new(wrapperspb.StringValue)
			err := ccDown.Invoke(ctx, methodDo, wrapperspb.String(req), resp)
			return resp.GetValue(), err
		}}
		cc := serve(t, tr, up, []grpc.UnaryServerInterceptor{
			idemgrpc.UnaryServerInterceptor(idem.NewExecutor(store, idem.SingleTenant()), idemgrpc.WithTenant(tenantFromMD))})
		key := newKey()
		got := map[string]string{}
		for _, tenant := range []string{"acme", "globex"} {
			r := call(metadata.AppendToOutgoingContext(t.Context(), "tenant", tenant), cc, key, "order-1")
			if r.err != nil {
				t.Fatalf("%s: %v", tenant, r.err)
			}
			got[tenant] = r.resp.GetValue()
		}
		if got["acme"] == got["globex"] || down.runs.Load() != 2 {
			t.Errorf("two tenants with one key downstream: answers %v, downstream runs %d, want two runs", got, down.runs.Load())
		}
		if ks := down.keysSeen(); len(ks) != 2 || ks[0] == ks[1] {
			t.Errorf("downstream keys %q, want two different derived keys", ks)
		}
	})
}
