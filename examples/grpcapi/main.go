// Command grpcapi plays the service-to-service stories: checkout (service
// A, an idemgen-wrapped method) calls payments (service B) over gRPC on
// loopback TCP, and prints how many times B charged each order.
//
//	go run .      # from examples/grpcapi (or make demo-grpc)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgen/idemgen/examples/grpcapi/checkout"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func main() {
	if _, err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "grpcapi:", err)
		os.Exit(1)
	}
}

// retryPolicy is checkout's service config for payments: grpc-go retries
// Unavailable, resending the same metadata (and so the same key).
const retryPolicy = `{"methodConfig":[{"name":[{"service":"payments.Payments"}],"retryPolicy":{
	"maxAttempts":4,"initialBackoff":"0.05s","maxBackoff":"0.5s","backoffMultiplier":2,
	"retryableStatusCodes":["UNAVAILABLE"]}}]}`

// payments is service B: it charges an order and counts, per order, the
// charges made and the calls that reached it.
type payments struct {
	mu       sync.Mutex
	charges  map[string]int
	attempts map[string]int
	lose     map[string]bool // orders whose next response the network loses
}

func newPayments() *payments {
	return &payments{charges: map[string]int{}, attempts: map[string]int{}, lose: map[string]bool{}}
}

func (p *payments) charge(_ context.Context, req *structpb.Struct) (*wrapperspb.StringValue, error) {
	order := req.GetFields()["order"].GetStringValue()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.charges[order]++
	return wrapperspb.String(fmt.Sprintf("ch_%s_%d", order, p.charges[order])), nil
}

// network is an interceptor outside the idempotency one: it counts the
// calls that reach B and loses a response on the way back when asked.
func (p *payments) network(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	order := req.(*structpb.Struct).GetFields()["order"].GetStringValue()
	p.mu.Lock()
	p.attempts[order]++
	p.mu.Unlock()
	resp, err := h(ctx, req)
	p.mu.Lock()
	lost := p.lose[order]
	p.lose[order] = false
	p.mu.Unlock()
	if lost {
		return nil, status.Error(codes.Unavailable, "connection reset: response lost")
	}
	return resp, err
}

func (p *payments) counts(order string) (charges, attempts int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charges[order], p.attempts[order]
}

var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "payments.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Charge",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := new(structpb.Struct)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(*payments).charge(ctx, req.(*structpb.Struct))
			}
			if icpt == nil {
				return h(ctx, req)
			}
			return icpt(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: checkout.ChargeMethod}, h)
		},
	}},
}

// startPayments serves B on loopback TCP; with idempotent false it has no
// idempotency interceptor (the contrast story).
func startPayments(p *payments, idempotent bool) (addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	icpts := []grpc.UnaryServerInterceptor{p.network}
	if idempotent {
		// SingleTenant: payments has one caller, the checkout service; a
		// service with many clients scopes keys by client (WithTenant).
		icpts = append(icpts, idemgrpc.UnaryServerInterceptor(idem.NewExecutor(memstore.New(), idem.SingleTenant()), idemgrpc.SingleTenant()))
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(icpts...))
	srv.RegisterService(&paymentsDesc, p)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	return lis.Addr().String(), func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			fmt.Fprintln(os.Stderr, "payments:", err)
		}
	}, nil
}

// Counts is, per story, how many times B charged the story's order.
type Counts map[string]int

// Story names.
const (
	storyLostBA     = "B's response to A lost, grpc-go retries"
	storyAFails     = "A fails after B charged, A's caller retries"
	storyLostAC     = "A's response to its client lost, the client retries"
	storyNoIdemgrpc = "B's response lost, without idemgrpc"
)

func run(ctx context.Context, out io.Writer) (Counts, error) {
	fmt.Fprintln(out, "idemgen gRPC demo: checkout (A, generated wrapper) calls payments (B, idemgrpc) over loopback TCP")
	counts := Counts{}
	for _, idempotent := range []bool{true, false} {
		if err := stories(ctx, out, idempotent, counts); err != nil {
			return nil, err
		}
	}
	fmt.Fprintln(out, "\ncharges per order:")
	for _, s := range []string{storyLostBA, storyAFails, storyLostAC, storyNoIdemgrpc} {
		fmt.Fprintf(out, "   %-52s %d\n", s, counts[s])
	}
	return counts, nil
}

func stories(ctx context.Context, out io.Writer, idempotent bool, counts Counts) error {
	p := newPayments()
	addr, stop, err := startPayments(p, idempotent)
	if err != nil {
		return err
	}
	defer stop()
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(retryPolicy)}
	if idempotent {
		dial = append(dial, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	}
	cc, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return err
	}
	defer cc.Close()
	var reserveFails atomic.Int32
	svc := &checkout.Service{Payments: cc, Reserve: func(context.Context, checkout.Order) error {
		if reserveFails.Add(-1) >= 0 {
			return errors.New("inventory unavailable")
		}
		return nil
	}}
	a := checkout.NewIdempotentService(svc, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	say := func(format string, args ...any) { fmt.Fprintf(out, "   "+format+"\n", args...) }
	report := func(story, order string) {
		charges, attempts := p.counts(order)
		counts[story] = charges
		say("=> B charged order %s %d time(s); %d call(s) reached B", order, charges, attempts)
	}
	place := func(order checkout.Order, attempt int) {
		placed, err := a.PlaceOrder(ctx, order)
		if err != nil {
			say("attempt %d: %v", attempt, err)
			return
		}
		say("attempt %d: order %s placed, charge %s", attempt, placed.OrderID, placed.ChargeID)
	}

	if !idempotent {
		fmt.Fprintf(out, "\n4. %s\n", storyNoIdemgrpc)
		p.lose["G-4"] = true
		place(checkout.Order{ID: "G-4", Amount: 4000}, 1)
		report(storyNoIdemgrpc, "G-4")
		return nil
	}

	fmt.Fprintf(out, "\n1. %s\n", storyLostBA)
	p.lose["G-1"] = true
	place(checkout.Order{ID: "G-1", Amount: 1000}, 1)
	report(storyLostBA, "G-1")

	fmt.Fprintf(out, "\n2. %s\n", storyAFails)
	reserveFails.Store(1)
	order := checkout.Order{ID: "G-2", Amount: 2000}
	place(order, 1)
	place(order, 2)
	report(storyAFails, "G-2")

	fmt.Fprintf(out, "\n3. %s\n", storyLostAC)
	order = checkout.Order{ID: "G-3", Amount: 3000}
	place(order, 1)
	say("(the response to the client was lost)")
	place(order, 2)
	report(storyLostAC, "G-3")
	return nil
}
