package idemgrpc_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
)

// The test service, declared by hand (no protoc): test.Echo/Do is unary,
// test.Echo/Count a server stream, both on wrapperspb.StringValue.
const (
	methodDo    = "/test.Echo/Do"
	methodCount = "/test.Echo/Count"
)

// echo is the service's implementation. Do answers "<request>#<run>", so a
// second run would answer other bytes; a request "fail:<Code>" answers that
// status (with a detail) instead. gate, when set, holds every run until it
// is closed; started is told of each run.
type echo struct {
	runs    atomic.Int64
	gate    chan struct{}
	started chan struct{}
	mu      sync.Mutex
	keys    []string // the idempotency-key of each run
	// call, when set, runs inside Do before it answers (to call further
	// services).
	call func(ctx context.Context) error
	// reply, when set, answers the request in place of "<request>#<run>".
	reply func(ctx context.Context, req string) (string, error)
}

func (e *echo) do(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	n := e.runs.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	e.mu.Lock()
	e.keys = append(e.keys, strings.Join(md.Get(idemgrpc.MetadataKey), ","))
	e.mu.Unlock()
	if e.started != nil {
		e.started <- struct{}{}
	}
	if e.gate != nil {
		<-e.gate
	}
	if e.call != nil {
		if err := e.call(ctx); err != nil {
			return nil, err
		}
	}
	if e.reply != nil {
		v, err := e.reply(ctx, req.GetValue())
		if err != nil {
			return nil, err
		}
		return wrapperspb.String(v), nil
	}
	if name, ok := strings.CutPrefix(req.GetValue(), "fail:"); ok {
		c := codes.Unknown
		for i := range codes.Code(17) {
			if i.String() == name {
				c = i
			}
		}
		st, err := status.New(c, "run "+strconv.FormatInt(n, 10)+" failed with "+name).
			WithDetails(wrapperspb.String("detail of run " + strconv.FormatInt(n, 10)))
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	return wrapperspb.String(req.GetValue() + "#" + strconv.FormatInt(n, 10)), nil
}

func (e *echo) keysSeen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.keys...)
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Do",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := new(wrapperspb.StringValue)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(*echo).do(ctx, req.(*wrapperspb.StringValue))
			}
			if icpt == nil {
				return h(ctx, req)
			}
			return icpt(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: methodDo}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Count",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			req := new(wrapperspb.StringValue)
			if err := stream.RecvMsg(req); err != nil {
				return err
			}
			md, _ := metadata.FromIncomingContext(stream.Context())
			if k := md.Get(idemgrpc.MetadataKey); len(k) > 0 {
				return status.Error(codes.Internal, "stream got a key")
			}
			srv.(*echo).runs.Add(1)
			for i := range 3 {
				if err := stream.SendMsg(wrapperspb.String(req.GetValue() + strconv.Itoa(i))); err != nil {
					return err
				}
			}
			return nil
		},
	}},
}

// transport names how the client reaches the server.
type transport string

const (
	bufconnT transport = "bufconn"
	tcpT     transport = "tcp"
)

// serve starts a gRPC server for svc with the interceptors and returns a
// client connection to it with the client options; both stop with t.
func serve(t *testing.T, tr transport, svc *echo, icpts []grpc.UnaryServerInterceptor, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	var lis net.Listener
	target := "passthrough:///bufnet"
	switch tr {
	case bufconnT:
		bl := bufconn.Listen(1 << 20)
		lis = bl
		dial = append(dial, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return bl.DialContext(ctx)
		}))
	default:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = l
		target = l.Addr().String()
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(icpts...))
	srv.RegisterService(&echoDesc, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	}()
	dial = append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(target, dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
		<-done
	})
	return cc
}

// result is one call's answer as the client saw it: the response's wire
// bytes, the status and the header metadata.
type result struct {
	wire     []byte
	resp     *wrapperspb.StringValue
	err      error
	replayed bool
}

// recorder is a client codec that keeps the wire bytes of the response.
type recorder struct {
	encoding.CodecV2
	wire []byte
}

func (r *recorder) Unmarshal(data mem.BufferSlice, v any) error {
	r.wire = data.Materialize()
	return r.CodecV2.Unmarshal(data, v)
}

// call calls test.Echo/Do with value on cc, with key when it is not empty.
func call(ctx context.Context, cc *grpc.ClientConn, key, value string, opts ...grpc.CallOption) result {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, key)
	}
	rec := &recorder{CodecV2: encoding.GetCodecV2("proto")}
	var hdr metadata.MD
	resp := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, methodDo, wrapperspb.String(value), resp, append(opts, grpc.ForceCodecV2(rec), grpc.Header(&hdr))...)
	r := result{wire: rec.wire, err: err, replayed: strings.Join(hdr.Get(idemgrpc.ReplayedKey), ",") == "true"}
	if err == nil {
		r.resp = resp
	}
	return r
}

// newStoreFunc returns a store for one subtest; stores of one backend share
// it (the tests use fresh keys).
type newStoreFunc func(t *testing.T) idem.Store

// interceptor is a single-tenant server interceptor on store (a test that
// scopes by tenant uses tenantInterceptor).
func interceptor(store idem.Store, opts ...idemgrpc.Option) grpc.UnaryServerInterceptor {
	return idemgrpc.UnaryServerInterceptor(idem.NewExecutor(store, idem.SingleTenant()), append([]idemgrpc.Option{idemgrpc.SingleTenant()}, opts...)...)
}

// tenantInterceptor is a server interceptor on store whose keys are scoped
// by tenant.
func tenantInterceptor(store idem.Store, tenant func(context.Context) string, opts ...idemgrpc.Option) grpc.UnaryServerInterceptor {
	return idemgrpc.UnaryServerInterceptor(idem.NewExecutor(store, idem.SingleTenant()), append([]idemgrpc.Option{idemgrpc.WithTenant(tenant)}, opts...)...)
}
