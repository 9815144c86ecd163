package idemgrpc_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// A server with the interceptor, a client with its own: the client's
// retry of one logical call (the same ctx from ContextWithOutgoingKey) is answered
// from the store, and the handler ran once.
func Example() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	svc := &echo{}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(ex, idemgrpc.SingleTenant())))
	srv.RegisterService(&echoDesc, svc)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cc, err := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()

	ctx := idemgrpc.ContextWithOutgoingKey(context.Background(), idemgrpc.GenerateKey()) // once per logical call
	for attempt := 1; attempt <= 2; attempt++ {
		var hdr metadata.MD
		resp := new(wrapperspb.StringValue)
		if err := cc.Invoke(ctx, "/test.Echo/Do", wrapperspb.String("order 1"), resp, grpc.Header(&hdr)); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("attempt %d: %s, replayed %v\n", attempt, resp.GetValue(), hdr.Get(idemgrpc.ReplayedKey))
	}
	fmt.Println("handler runs:", svc.runs.Load())
	// Output:
	// attempt 1: order 1#1, replayed []
	// attempt 2: order 1#1, replayed [true]
	// handler runs: 1
}
