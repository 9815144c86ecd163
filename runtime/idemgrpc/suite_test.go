package idemgrpc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
)

func newKey() string {
	b := make([]byte, 12)
	rand.Read(b)
	return "k-" + hex.EncodeToString(b)
}

// runSuite runs the store-independent tests of the interceptors over tr on
// the stores that newStore returns.
func runSuite(t *testing.T, tr transport, newStore newStoreFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, tr transport, newStore newStoreFunc)
	}{
		{"ReplayByteForByte", testReplay},
		{"StatusPolicy", testStatusPolicy},
		{"MissingAndInvalidKey", testBadKeys},
		{"KeyReusedFailedPrecondition", testKeyReused},
		{"Concurrent64OneRun", testConcurrent},
		{"Concurrent64Wait", testConcurrentWait},
		{"ClientTimeoutThenRetry", testTimeoutThenRetry},
		{"LostResponseGRPCRetryPolicy", testLostResponseRetryPolicy},
		{"TenantIsolation", testTenants},
		{"StreamingPassesThrough", testStreaming},
		{"ChainABC", testChain},
		{"TenantReachesWrapper", testTenantReachesWrapper},
		{"DownstreamSequence", testDownstreamSequence},
		{"DownstreamRefusal", testDownstreamRefusal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, tr, newStore)
		})
	}
}

func testReplay(t *testing.T, tr transport, newStore newStoreFunc) {
	svc := &echo{}
	cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(newStore(t))})
	key := newKey()
	first := call(t.Context(), cc, key, "pay 10")
	if first.err != nil || first.replayed {
		t.Fatalf("first call: err %v, replayed %v", first.err, first.replayed)
	}
	for i := range 3 {
		again := call(t.Context(), cc, key, "pay 10")
		if again.err != nil {
			t.Fatalf("retry %d: %v", i, again.err)
		}
		if !again.replayed {
			t.Errorf("retry %d: no %s: true header", i, idemgrpc.ReplayedKey)
		}
		if !bytes.Equal(again.wire, first.wire) {
			t.Errorf("retry %d: wire bytes %x, first call's %x", i, again.wire, first.wire)
		}
	}
	if got := svc.runs.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
	// The quoted and bare forms name one key.
	if r := call(t.Context(), cc, idemhttpFormat(key), "pay 10"); r.err != nil || !r.replayed {
		t.Errorf("quoted key: err %v, replayed %v", r.err, r.replayed)
	}
}

func idemhttpFormat(k string) string { return `"` + k + `"` }

// testStatusPolicy: a status the policy stores is replayed with its code,
// message and details; one it does not releases the key.
func testStatusPolicy(t *testing.T, tr transport, newStore newStoreFunc) {
	store := newStore(t)
	tests := []struct {
		code   codes.Code
		stored bool
		opts   []idemgrpc.Option
	}{
		{codes.InvalidArgument, true, nil},
		{codes.NotFound, true, nil},
		{codes.AlreadyExists, true, nil},
		{codes.PermissionDenied, true, nil},
		{codes.FailedPrecondition, true, nil},
		{codes.OutOfRange, true, nil},
		{codes.Unauthenticated, true, nil},
		{codes.Unavailable, false, nil},
		{codes.DeadlineExceeded, false, nil},
		{codes.Internal, false, nil},
		{codes.Unknown, false, nil},
		{codes.ResourceExhausted, false, nil},
		{codes.Aborted, false, nil},
		{codes.Canceled, false, nil},
		{codes.DataLoss, false, nil},
		{codes.Unimplemented, false, nil},
		{codes.Internal, true, []idemgrpc.Option{idemgrpc.WithPolicy(idemgrpc.StoreAll)}},
		{codes.Unavailable, true, []idemgrpc.Option{idemgrpc.WithPolicy(idemgrpc.StoreAll)}},
	}
	for _, tc := range tests {
		svc := &echo{}
		cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(store, tc.opts...)})
		key := newKey()
		first := call(t.Context(), cc, key, "fail:"+tc.code.String())
		second := call(t.Context(), cc, key, "fail:"+tc.code.String())
		s1, s2 := status.Convert(first.err), status.Convert(second.err)
		if s1.Code() != tc.code || s2.Code() != tc.code {
			t.Errorf("%v: codes %v, %v", tc.code, s1.Code(), s2.Code())
			continue
		}
		wantRuns := int64(2)
		if tc.stored {
			wantRuns = 1
			if !proto.Equal(s1.Proto(), s2.Proto()) || !second.replayed {
				t.Errorf("%v stored: replay %v (replayed %v), first %v", tc.code, s2.Proto(), second.replayed, s1.Proto())
			}
		}
		if got := svc.runs.Load(); got != wantRuns {
			t.Errorf("%v (stored %v): %d runs, want %d", tc.code, tc.stored, got, wantRuns)
		}
	}
}

func testBadKeys(t *testing.T, tr transport, newStore newStoreFunc) {
	store := newStore(t)
	svc := &echo{}
	cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(store)})
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'a'
	}
	tests := []struct {
		name string
		md   metadata.MD
		want string
	}{
		{"missing", nil, "idempotency-key is missing"},
		{"empty", metadata.Pairs(idemgrpc.MetadataKey, ""), "empty"},
		{"blank", metadata.Pairs(idemgrpc.MetadataKey, "  "), "empty"},
		{"too long", metadata.Pairs(idemgrpc.MetadataKey, string(long)), "longer than 255"},
		// A non-ASCII or control character never leaves a grpc-go client
		// (it refuses such a metadata value); ParseKey's tests cover it.
		{"bad quoting", metadata.Pairs(idemgrpc.MetadataKey, `"a\x"`), "structured-field"},
		{"unterminated", metadata.Pairs(idemgrpc.MetadataKey, `"abc`), "structured-field"},
		{"quoted empty", metadata.Pairs(idemgrpc.MetadataKey, `""`), "empty"},
		{"two values", metadata.Pairs(idemgrpc.MetadataKey, "a", idemgrpc.MetadataKey, "b"), "more than one"},
	}
	for _, tc := range tests {
		ctx := metadata.NewOutgoingContext(t.Context(), tc.md)
		r := call(ctx, cc, "", "x")
		st := status.Convert(r.err)
		if st.Code() != codes.InvalidArgument || !bytes.Contains([]byte(st.Message()), []byte(tc.want)) {
			t.Errorf("%s: %v %q, want InvalidArgument naming %q", tc.name, st.Code(), st.Message(), tc.want)
		}
	}
	if got := svc.runs.Load(); got != 0 {
		t.Errorf("handler ran %d times on refused calls", got)
	}
	// WithOptionalKey lets a call without a key through, unprotected, and
	// still refuses a malformed one.
	opt := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(store, idemgrpc.WithOptionalKey())})
	if r := call(t.Context(), opt, "", "x"); r.err != nil {
		t.Errorf("optional key, none sent: %v", r.err)
	}
	if r := call(t.Context(), opt, `"bad`, "x"); status.Code(r.err) != codes.InvalidArgument {
		t.Errorf("optional key, malformed: %v", r.err)
	}
	// A method the selector leaves out passes through.
	none := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(store,
		idemgrpc.WithMethods(func(m string) bool { return m != methodDo }))})
	if r := call(t.Context(), none, "", "x"); r.err != nil {
		t.Errorf("unselected method: %v", r.err)
	}
}

func testKeyReused(t *testing.T, tr transport, newStore newStoreFunc) {
	svc := &echo{}
	cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(newStore(t))})
	key := newKey()
	if r := call(t.Context(), cc, key, "pay 10"); r.err != nil {
		t.Fatal(r.err)
	}
	r := call(t.Context(), cc, key, "pay 99")
	if st := status.Convert(r.err); st.Code() != codes.FailedPrecondition || !bytes.Contains([]byte(st.Message()), []byte("different request")) {
		t.Errorf("other request under the same key: %v %q, want FailedPrecondition", st.Code(), st.Message())
	}
	if got := svc.runs.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
}

// testConcurrent: 64 identical calls at once; the first runs (held at a
// gate until the 63 others were refused with Aborted and a RetryInfo), the
// others then retry after the delay and get its response.
func testConcurrent(t *testing.T, tr transport, newStore newStoreFunc) {
	const n = 64
	svc := &echo{gate: make(chan struct{})}
	cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(newStore(t), idemgrpc.WithLease(time.Minute))})
	key := newKey()
	results := make([]result, n)
	aborted := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for first := true; ; first = false {
				r := call(t.Context(), cc, key, "order 7")
				st := status.Convert(r.err)
				if st.Code() != codes.Aborted {
					results[i] = r
					if first {
						aborted <- struct{}{} // answered at once: the gate must not wait for it
					}
					return
				}
				var info *errdetails.RetryInfo
				for _, d := range st.Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						info = ri
					}
				}
				if info == nil || info.GetRetryDelay().AsDuration() <= 0 || info.GetRetryDelay().AsDuration() > time.Minute {
					t.Errorf("Aborted without a RetryInfo within the lease: %v", st.Details())
				}
				if first {
					aborted <- struct{}{}
				}
				<-svc.gate // retry once the first call may have finished
				time.Sleep(time.Millisecond)
			}
		})
	}
	for range n - 1 {
		<-aborted
	}
	close(svc.gate)
	wg.Wait()
	if got := svc.runs.Load(); got != 1 {
		t.Fatalf("handler ran %d times for %d identical calls, want 1", got, n)
	}
	for i, r := range results {
		if r.err != nil || !bytes.Equal(r.wire, results[0].wire) {
			t.Errorf("call %d: err %v, wire %x", i, r.err, r.wire)
		}
	}
}

// testConcurrentWait: with WithWait, the 63 duplicates wait for the first
// and all get its response without an error.
func testConcurrentWait(t *testing.T, tr transport, newStore newStoreFunc) {
	const n = 64
	svc := &echo{gate: make(chan struct{}), started: make(chan struct{}, n)}
	cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(newStore(t), idemgrpc.WithWait(time.Minute))})
	key := newKey()
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = call(t.Context(), cc, key, "order 8") })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-svc.started:
	case <-done:
		t.Fatalf("every call ended before one ran the handler: %v", results[0].err)
	}
	close(svc.gate)
	<-done
	if got := svc.runs.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
	replayed := 0
	for i, r := range results {
		if r.err != nil || !bytes.Equal(r.wire, results[0].wire) {
			t.Errorf("call %d: err %v, wire %x, first %x", i, r.err, r.wire, results[0].wire)
		}
		if r.replayed {
			replayed++
		}
	}
	if replayed != n-1 {
		t.Errorf("%d calls replayed, want %d", replayed, n-1)
	}
}

// testTimeoutThenRetry: the client gives up (as on a timeout) while the
// handler runs; the handler finishes anyway, and the retry with the
// same key gets the stored response.
func testTimeoutThenRetry(t *testing.T, tr transport, newStore newStoreFunc) {
	svc := &echo{gate: make(chan struct{}), started: make(chan struct{}, 2)}
	cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(newStore(t), idemgrpc.WithWait(time.Minute))},
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	ctx := idemgrpc.ContextWithOutgoingKey(t.Context(), idemgrpc.GenerateKey()) // one key for the logical call
	first := make(chan result, 1)
	// The client gives up once the handler runs: a cancellation, not a
	// short deadline, which a loaded machine could pass before the call
	// reaches the server.
	cctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	go func() { first <- call(cctx, cc, "", "ship 3") }()
	select {
	case <-svc.started:
	case r := <-first:
		t.Fatalf("first attempt ended before the handler ran: %v", r.err)
	}
	giveUp()
	r := <-first // the client is gone while the handler is held
	if status.Code(r.err) != codes.Canceled {
		t.Fatalf("first attempt: %v, want Canceled", r.err)
	}
	close(svc.gate) // the handler finishes after its client gave up
	retry := call(ctx, cc, "", "ship 3")
	if retry.err != nil || retry.resp.GetValue() != "ship 3#1" || !retry.replayed {
		t.Fatalf("retry: %v %v (replayed %v), want the first run's stored response", retry.err, retry.resp, retry.replayed)
	}
	if got := svc.runs.Load(); got != 1 {
		t.Errorf("handler ran %d times, want 1", got)
	}
}

// retryConfig is a service config whose retry policy retries Unavailable
// and Aborted: grpc-go resends the same metadata on every attempt.
const retryConfig = `{"methodConfig":[{"name":[{"service":"test.Echo"}],"retryPolicy":{
	"maxAttempts":5,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,
	"retryableStatusCodes":["UNAVAILABLE","ABORTED"]}}]}`

// testLostResponseRetryPolicy: an outer interceptor loses the first
// response after the handler ran and stored it (a network fault between
// the handler and the client); grpc-go's retry policy retries with the key
// the client interceptor set once, and the retry replays: one run. A
// second call whose handler fails with Unavailable is retried by the policy
// and runs again under the same key.
func testLostResponseRetryPolicy(t *testing.T, tr transport, newStore newStoreFunc) {
	svc := &echo{}
	var lost sync.Once
	lose := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		dropped := false
		if req.(*wrapperspb.StringValue).GetValue() == "lose" {
			lost.Do(func() { dropped = true })
		}
		if dropped {
			return nil, status.Error(codes.Unavailable, "response lost on the way")
		}
		return resp, err
	}
	cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{lose, interceptor(newStore(t))},
		grpc.WithDefaultServiceConfig(retryConfig),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	r := call(t.Context(), cc, "", "lose")
	if r.err != nil || r.resp.GetValue() != "lose#1" || !r.replayed {
		t.Fatalf("lost response retried by the policy: %v %v (replayed %v)", r.err, r.resp, r.replayed)
	}
	keys := svc.keysSeen()
	if len(keys) != 1 || keys[0] == "" {
		t.Fatalf("handler ran with keys %q, want one run with a key", keys)
	}
	r = call(t.Context(), cc, "", "fail:Unavailable")
	if status.Code(r.err) != codes.Unavailable {
		t.Fatalf("always-unavailable: %v", r.err)
	}
	keys = svc.keysSeen()[1:]
	if len(keys) != 5 {
		t.Fatalf("released Unavailable ran %d times, want 5 (maxAttempts)", len(keys))
	}
	for _, k := range keys {
		if k != keys[0] {
			t.Errorf("attempts of one call carried keys %q, want one key", keys)
			break
		}
	}
}

func testTenants(t *testing.T, tr transport, newStore newStoreFunc) {
	svc := &echo{}
	tenant := func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("tenant"); len(v) == 1 {
			return v[0]
		}
		return ""
	}
	var mu sync.Mutex
	var missing []idemgrpc.Event
	observe := func(ev idemgrpc.Event) {
		if ev.Kind == idemgrpc.EventTenantMissing {
			mu.Lock()
			missing = append(missing, ev)
			mu.Unlock()
		}
	}
	cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{tenantInterceptor(newStore(t), tenant, idemgrpc.WithObserver(observe))})
	key := newKey()
	a := call(metadata.AppendToOutgoingContext(t.Context(), "tenant", "a"), cc, key, "x")
	b := call(metadata.AppendToOutgoingContext(t.Context(), "tenant", "b"), cc, key, "x")
	a2 := call(metadata.AppendToOutgoingContext(t.Context(), "tenant", "a"), cc, key, "x")
	if a.err != nil || b.err != nil || a2.err != nil {
		t.Fatal(a.err, b.err, a2.err)
	}
	if b.replayed || !a2.replayed || a.resp.GetValue() == b.resp.GetValue() || a2.resp.GetValue() != a.resp.GetValue() {
		t.Errorf("tenants share a key space: a %v, b %v (replayed %v), a again %v", a.resp, b.resp, b.replayed, a2.resp)
	}
	if got := svc.runs.Load(); got != 2 {
		t.Errorf("handler ran %d times, want 2 (one per tenant)", got)
	}
	// A call with no tenant, even with tenant a's key and request, is
	// refused before anything runs: it gets neither a's outcome nor a key
	// space shared with other calls without a tenant.
	for range 2 {
		if r := call(t.Context(), cc, key, "x"); status.Code(r.err) != codes.Unauthenticated || r.replayed {
			t.Errorf("a call without a tenant: %v (replayed %v), want Unauthenticated", r.err, r.replayed)
		}
	}
	if got := svc.runs.Load(); got != 2 {
		t.Errorf("handler ran %d times after the calls without a tenant, want 2", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(missing) != 2 || missing[0].Code != codes.Unauthenticated || missing[0].Key != key {
		t.Errorf("tenant_missing events %+v", missing)
	}
}

// testStreaming: a streaming method is not intercepted on either side:
// no key is required or sent, and every message arrives.
func testStreaming(t *testing.T, tr transport, newStore newStoreFunc) {
	svc := &echo{}
	cc := serve(t, tr, svc, []grpc.UnaryServerInterceptor{interceptor(newStore(t))},
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
	for range 2 {
		st, err := cc.NewStream(t.Context(), &echoDesc.Streams[0], methodCount)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(wrapperspb.String("n")); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			m := new(wrapperspb.StringValue)
			if err := st.RecvMsg(m); err != nil {
				if status.Code(err) != codes.OK && err.Error() != "EOF" {
					t.Fatalf("stream: %v", err)
				}
				break
			}
			got = append(got, m.GetValue())
		}
		if len(got) != 3 || got[0] != "n0" || got[2] != "n2" {
			t.Errorf("stream messages %q", got)
		}
	}
	if got := svc.runs.Load(); got != 2 {
		t.Errorf("stream handler ran %d times, want 2 (streams are never deduplicated)", got)
	}
}

// testChain: A calls B, B calls C, each behind the server interceptor and
// calling through the client interceptor. A's first run fails after B
// returned (released: Unavailable); the client's retry runs A again, whose
// call to B carries the same derived key, so B replays and C ran once.
func testChain(t *testing.T, tr transport, newStore newStoreFunc) {
	store := newStore(t)
	clientIcpt := grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor())
	c := &echo{}
	ccC := serve(t, tr, c, []grpc.UnaryServerInterceptor{interceptor(store)}, clientIcpt)
	b := &echo{}
	b.call = func(ctx context.Context) error {
		return ccC.Invoke(ctx, methodDo, wrapperspb.String("to C"), new(wrapperspb.StringValue))
	}
	ccB := serve(t, tr, b, []grpc.UnaryServerInterceptor{interceptor(store)}, clientIcpt)
	a := &echo{}
	var aKeys []string
	var mu sync.Mutex
	a.call = func(ctx context.Context) error {
		parent, _ := idem.KeyFrom(ctx)
		mu.Lock()
		aKeys = append(aKeys, parent)
		mu.Unlock()
		if err := ccB.Invoke(ctx, methodDo, wrapperspb.String("to B"), new(wrapperspb.StringValue)); err != nil {
			return err
		}
		if a.runs.Load() == 1 {
			return status.Error(codes.Unavailable, "A failed after B answered")
		}
		return nil
	}
	ccA := serve(t, tr, a, []grpc.UnaryServerInterceptor{interceptor(store)}, clientIcpt)
	ctx := idemgrpc.ContextWithOutgoingKey(t.Context(), idemgrpc.GenerateKey())
	if r := call(ctx, ccA, "", "start"); status.Code(r.err) != codes.Unavailable {
		t.Fatalf("A's first attempt: %v, want Unavailable", r.err)
	}
	if r := call(ctx, ccA, "", "start"); r.err != nil {
		t.Fatalf("A's retry: %v", r.err)
	}
	if a.runs.Load() != 2 || b.runs.Load() != 1 || c.runs.Load() != 1 {
		t.Errorf("runs A=%d B=%d C=%d, want 2, 1, 1", a.runs.Load(), b.runs.Load(), c.runs.Load())
	}
	if len(aKeys) != 2 || aKeys[0] != aKeys[1] || aKeys[0] == "" {
		t.Fatalf("A's record keys %q", aKeys)
	}
	if bk, want := b.keysSeen(), idem.Derive(aKeys[0], "grpc "+methodDo); len(bk) != 1 || bk[0] != want {
		t.Errorf("B got key %q, want Derive(A's key) %q", bk, want)
	}
	if ck, bk := c.keysSeen(), b.keysSeen(); len(ck) != 1 || ck[0] == bk[0] || ck[0] == "" {
		t.Errorf("C got key %q (B's %q), want its own derived key", ck, bk)
	}
}
