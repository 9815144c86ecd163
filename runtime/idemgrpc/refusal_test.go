package idemgrpc_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
)

// testDownstreamRefusal (issue 35, class 6): a refusal of a downstream
// idemgrpc service carries a google.rpc.ErrorInfo (domain
// idemgrpc.ErrorDomain, the reason), so the upstream can tell "the
// idempotency layer refused" from the service's own outcome; the upstream's
// interceptor does not store such a refusal as its own outcome even when
// its policy stores the code: the retry runs the upstream handler again.
// The downstream service's own FailedPrecondition (its business outcome,
// no ErrorInfo) is stored and replayed as before.
func testDownstreamRefusal(t *testing.T, tr transport, newStore newStoreFunc) {
	store := newStore(t)
	down := &echo{}
	// The downstream scopes its keys by a "tenant" metadata value that the
	// upstream passes on only when asked to.
	ccDown := serve(t, tr, down, []grpc.UnaryServerInterceptor{
		idemgrpc.UnaryServerInterceptor(idem.NewExecutor(store, idem.SingleTenant()), idemgrpc.WithTenant(tenantFromMD))})
	reused := newKey()
	if r := call(metadata.AppendToOutgoingContext(t.Context(), "tenant", "up"), ccDown, reused, "first request"); r.err != nil {
		t.Fatal(r.err)
	}
	cases := []struct {
		name   string
		code   codes.Code
		reason string // "" for the service's own outcome
		call   func(ctx context.Context) error
	}{
		{"tenant not passed on", codes.Unauthenticated, idemgrpc.ReasonTenantMissing, func(ctx context.Context) error {
			ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, newKey())
			return ccDown.Invoke(ctx, methodDo, wrapperspb.String("x"), new(wrapperspb.StringValue))
		}},
		{"key reused", codes.FailedPrecondition, idemgrpc.ReasonKeyReused, func(ctx context.Context) error {
			ctx = metadata.AppendToOutgoingContext(ctx, "tenant", "up", idemgrpc.MetadataKey, reused)
			return ccDown.Invoke(ctx, methodDo, wrapperspb.String("another request"), new(wrapperspb.StringValue))
		}},
		{"key invalid", codes.InvalidArgument, idemgrpc.ReasonKeyInvalid, func(ctx context.Context) error {
			ctx = metadata.AppendToOutgoingContext(ctx, "tenant", "up", idemgrpc.MetadataKey, strings.Repeat("k", 256))
			return ccDown.Invoke(ctx, methodDo, wrapperspb.String("x"), new(wrapperspb.StringValue))
		}},
		{"key missing", codes.InvalidArgument, idemgrpc.ReasonKeyMissing, func(ctx context.Context) error {
			ctx = metadata.AppendToOutgoingContext(ctx, "tenant", "up")
			return ccDown.Invoke(ctx, methodDo, wrapperspb.String("x"), new(wrapperspb.StringValue))
		}},
		{"the service's own FailedPrecondition", codes.FailedPrecondition, "", func(ctx context.Context) error {
			ctx = metadata.AppendToOutgoingContext(ctx, "tenant", "up", idemgrpc.MetadataKey, newKey())
			return ccDown.Invoke(ctx, methodDo, wrapperspb.String("fail:FailedPrecondition"), new(wrapperspb.StringValue))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var runs atomic.Int64
			up := &echo{reply: func(ctx context.Context, _ string) (string, error) {
				runs.Add(1)
				return "", c.call(ctx) // passed through as the upstream's answer
			}}
			cc := serve(t, tr, up, []grpc.UnaryServerInterceptor{interceptor(store)})
			key := newKey()
			for i := range 2 {
				r := call(t.Context(), cc, key, "order")
				st := status.Convert(r.err)
				if st.Code() != c.code {
					t.Fatalf("call %d: %v, want %v", i, r.err, c.code)
				}
				reason, ok := idemgrpc.Refusal(r.err)
				if c.reason == "" {
					if ok {
						t.Errorf("the service's own outcome reads as a refusal %q", reason)
					}
					continue
				}
				if !ok || reason != c.reason {
					t.Errorf("call %d: Refusal = %q, %v; want %q", i, reason, ok, c.reason)
				}
				var info *errdetails.ErrorInfo
				for _, d := range st.Details() {
					if e, ok := d.(*errdetails.ErrorInfo); ok {
						info = e
					}
				}
				if info == nil || info.GetDomain() != idemgrpc.ErrorDomain || info.GetReason() != c.reason {
					t.Errorf("call %d: details %v, want an ErrorInfo %s/%s", i, st.Details(), idemgrpc.ErrorDomain, c.reason)
				}
				if r.replayed {
					t.Errorf("call %d: the downstream's refusal was stored and replayed as the upstream's outcome", i)
				}
			}
			want := int64(2) // refused downstream: released upstream, run again
			if c.reason == "" {
				want = 1 // the service's outcome: stored upstream, replayed
			}
			if got := runs.Load(); got != want {
				t.Errorf("upstream handler ran %d times, want %d", got, want)
			}
		})
	}
}
