package idemgrpc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
	"github.com/idemgen/idemgen/runtime/memstore"
)

var (
	errNotFound         = errors.New("order not found") // not final
	errAlreadyCancelled = errors.New("order already cancelled")
)

// TestEdgeFollowsWrapper: as in idemhttp, the interceptor follows the
// decision of the wrapped method the handler called, whatever code the
// handler mapped it to; without one, the policy decides.
func TestEdgeFollowsWrapper(t *testing.T) {
	cases := []struct {
		name     string
		wrapped  bool
		err      error // the wrapped method's
		code     codes.Code
		wantRuns int
	}{
		{"wrapper success, OK", true, nil, codes.OK, 1},
		{"wrapper transient mapped to NotFound: not stored", true, errNotFound, codes.NotFound, 2},
		{"wrapper final mapped to Aborted: stored", true, errAlreadyCancelled, codes.Aborted, 1},
		{"wrapper final mapped to Internal: released", true, errAlreadyCancelled, codes.Internal, 2},
		{"no wrapper, NotFound: policy stores", false, nil, codes.NotFound, 1},
		{"no wrapper, Aborted: policy releases", false, nil, codes.Aborted, 2},
	}
	m := idem.Method{Op: "Orders.Cancel", TTL: time.Minute, Final: []idem.FinalError{{Name: "cancelled", Err: errAlreadyCancelled}}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
			icpt := idemgrpc.UnaryServerInterceptor(ex, idemgrpc.SingleTenant())
			runs := 0
			handler := func(ctx context.Context, req any) (any, error) {
				runs++
				if c.wrapped {
					var k idem.KeyParts
					k.String("id", "order-1")
					var h idem.Hasher
					h.String("order-1")
					_, _ = idem.Do(ctx, ex, &m, &k, &h, func(context.Context) (string, error) { return "", c.err })
				}
				if c.code != codes.OK {
					return nil, status.Error(c.code, "mapped")
				}
				return wrapperspb.String("ok"), nil
			}
			info := &grpc.UnaryServerInfo{FullMethod: "/orders.Orders/Cancel"}
			for range 2 {
				ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(idemgrpc.MetadataKey, "client-key-1"))
				_, _ = icpt(ctx, wrapperspb.String("order-1"), info, handler) // a replay fails to set its header here: only runs count
			}
			if runs != c.wantRuns {
				t.Fatalf("handler ran %d times, want %d", runs, c.wantRuns)
			}
		})
	}
}
