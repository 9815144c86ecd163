package idemgrpc_test

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestRetryInfoEstimate (issue 35, class 6): the RetryInfo of an Aborted
// (a call with the key is running) is the expected time to its outcome, not
// the lease left: the smaller of the lease left and the method's expected
// run (WithExpectedRun, default DefaultExpectedRun), capped by
// WithMaxRetryAfter. The clocks are fake: the lease left is exactly the
// lease.
func TestRetryInfoEstimate(t *testing.T) {
	const lease = 30 * time.Second
	cases := []struct {
		name string
		opts []idemgrpc.Option
		want time.Duration
	}{
		{"default: the expected run, not the lease", nil, idemgrpc.DefaultExpectedRun},
		{"WithExpectedRun(2s)", []idemgrpc.Option{idemgrpc.WithExpectedRun(2 * time.Second)}, 2 * time.Second},
		{"an expected run over the lease: the lease left", []idemgrpc.Option{idemgrpc.WithExpectedRun(time.Hour)}, lease},
		{"capped by WithMaxRetryAfter", []idemgrpc.Option{idemgrpc.WithExpectedRun(10 * time.Second), idemgrpc.WithMaxRetryAfter(3 * time.Second)}, 3 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			ex := idem.NewExecutor(memstore.New(memstore.WithClock(clk.Now)), idem.SingleTenant(), idem.WithClock(clk))
			svc := &echo{gate: make(chan struct{}), started: make(chan struct{}, 1)}
			opts := append([]idemgrpc.Option{idemgrpc.SingleTenant(), idemgrpc.WithLease(lease)}, c.opts...)
			cc := serve(t, bufconnT, svc, []grpc.UnaryServerInterceptor{idemgrpc.UnaryServerInterceptor(ex, opts...)})
			key := newKey()
			first := make(chan result, 1)
			go func() { first <- call(t.Context(), cc, key, "x") }()
			<-svc.started
			r := call(t.Context(), cc, key, "x")
			close(svc.gate)
			if f := <-first; f.err != nil {
				t.Fatal(f.err)
			}
			st := status.Convert(r.err)
			if st.Code() != codes.Aborted {
				t.Fatalf("%v, want Aborted", r.err)
			}
			var info *errdetails.RetryInfo
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					info = ri
				}
			}
			if got := info.GetRetryDelay().AsDuration(); got != c.want {
				t.Errorf("RetryInfo %v, want %v", got, c.want)
			}
		})
	}
}
