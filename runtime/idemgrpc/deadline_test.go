package idemgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestLeaseRenewedWhileHandlerRuns (issue 35, class 6): a handler that runs
// past its lease (5 s of the fake clock under a 3 s lease) keeps its key:
// the interceptor renews the lease while it runs, so a retry meanwhile is
// told Aborted instead of taking the key over and running the handler a
// second time, and once the handler returns every retry gets its outcome.
func TestLeaseRenewedWhileHandlerRuns(t *testing.T) {
	clk := newFakeClock()
	var renewed atomic.Int64
	ex := idem.NewExecutor(memstore.New(memstore.WithClock(clk.Now)), idem.SingleTenant(), idem.WithClock(clk),
		idem.WithObserver(func(ev idem.Event) {
			if ev.Kind == idem.EventRenewed {
				renewed.Add(1)
			}
		}))
	svc := &echo{gate: make(chan struct{}), started: make(chan struct{}, 2)}
	cc := serve(t, bufconnT, svc, []grpc.UnaryServerInterceptor{
		idemgrpc.UnaryServerInterceptor(ex, idemgrpc.SingleTenant(), idemgrpc.WithLease(3*time.Second))})
	key := newKey()
	first := make(chan result, 1)
	go func() { first <- call(t.Context(), cc, key, "pay") }()
	<-svc.started
	for range 5 { // the handler runs 5 s: the renewals, every third of the lease, keep the claim
		clk.WaitSleepers(t, 1)
		clk.Advance(time.Second)
	}
	if r := call(t.Context(), cc, key, "pay"); status.Code(r.err) != codes.Aborted {
		t.Errorf("a retry while the handler runs past its lease: %v, want Aborted (the claim is renewed)", r.err)
	}
	close(svc.gate)
	r1 := <-first
	r2 := call(t.Context(), cc, key, "pay")
	if r1.err != nil || r2.err != nil || r1.resp.GetValue() != "pay#1" || r2.resp.GetValue() != "pay#1" || !r2.replayed {
		t.Errorf("first %v %v, retry %v %v (replayed %v): want one answer, pay#1", r1.resp, r1.err, r2.resp, r2.err, r2.replayed)
	}
	if got := svc.runs.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
	if renewed.Load() < 4 {
		t.Errorf("%d renewals over 5 s under a 3 s lease, want at least 4", renewed.Load())
	}
}

// TestHandlerDeadline (issue 35, class 6): the handler keeps the client's
// deadline (it runs without the client's cancellation, not without its
// deadline), so that its downstream calls inherit the budget; without one
// it runs under WithHandlerTimeout; and a downstream call that hangs ends
// there, with DeadlineExceeded, and releases the key.
func TestHandlerDeadline(t *testing.T) {
	t.Run("the client's deadline is kept", func(t *testing.T) {
		deadlines := make(chan time.Time, 1)
		svc := &echo{reply: func(ctx context.Context, req string) (string, error) {
			dl, ok := ctx.Deadline()
			if !ok {
				return "", status.Error(codes.Internal, "no deadline")
			}
			deadlines <- dl
			return req, nil
		}}
		cc := serve(t, bufconnT, svc, []grpc.UnaryServerInterceptor{interceptor(memstore.New(), idemgrpc.WithHandlerTimeout(2*time.Hour))})
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		if r := call(ctx, cc, newKey(), "x"); r.err != nil {
			t.Fatal(r.err)
		}
		if dl := <-deadlines; dl.After(time.Now().Add(90 * time.Minute)) {
			t.Errorf("handler deadline %v: the client's (an hour) was dropped", dl)
		}
	})
	t.Run("a hanging downstream ends at the handler timeout", func(t *testing.T) {
		hang := &echo{gate: make(chan struct{})}
		t.Cleanup(func() { close(hang.gate) })
		ccDown := serve(t, bufconnT, hang, []grpc.UnaryServerInterceptor{interceptor(memstore.New())},
			grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
		up := &echo{reply: func(ctx context.Context, req string) (string, error) {
			if _, ok := ctx.Deadline(); !ok {
				return "", status.Error(codes.Internal, "no deadline")
			}
			err := ccDown.Invoke(ctx, methodDo, wrapperspb.String(req), new(wrapperspb.StringValue))
			return "", err
		}}
		cc := serve(t, bufconnT, up, []grpc.UnaryServerInterceptor{interceptor(memstore.New(), idemgrpc.WithHandlerTimeout(50*time.Millisecond))})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang guard only
		defer cancel()
		key := newKey()
		if r := call(ctx, cc, key, "x"); status.Code(r.err) != codes.DeadlineExceeded || r.replayed {
			t.Fatalf("first call: %v (replayed %v), want DeadlineExceeded, not stored", r.err, r.replayed)
		}
		// The retry runs the handler again, whose downstream call (the same
		// derived key) finds the hung call in progress: a refusal, passed
		// on and not stored either.
		r := call(ctx, cc, key, "x")
		if reason, _ := idemgrpc.Refusal(r.err); status.Code(r.err) != codes.Aborted || reason != idemgrpc.ReasonInProgress || r.replayed {
			t.Fatalf("retry: %v (replayed %v), want the downstream's Aborted, not stored", r.err, r.replayed)
		}
		if got := up.runs.Load(); got != 2 {
			t.Errorf("upstream ran %d times, want 2 (a timed-out handler releases its key)", got)
		}
	})
}
