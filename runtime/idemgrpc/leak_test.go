package idemgrpc_test

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgrpc"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStoreErrorsDoNotLeak (issue 35, class 6): when the store cannot be
// reached, the client is answered Unavailable (STORE_UNAVAILABLE) with a
// message that names no database user, database, host or port; the
// server's log (WithLogger) has the store's error in full.
func TestStoreErrorsDoNotLeak(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	_ = l.Close()
	pool, err := pgxpool.New(t.Context(), "postgres://leakyuser:leakypass@"+addr+"/leakydb?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rc := redis.NewClient(&redis.Options{Addr: addr, Username: "leakyuser", Password: "leakypass", MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	for _, c := range []struct {
		name  string
		store idem.Store
	}{
		{"pgstore", pgstore.New(pool)},
		{"redisstore", redisstore.New(rc)},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logged syncBuffer
			svc := &echo{}
			cc := serve(t, bufconnT, svc, []grpc.UnaryServerInterceptor{interceptor(c.store,
				idemgrpc.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))})
			r := call(t.Context(), cc, newKey(), "x")
			st := status.Convert(r.err)
			if reason, _ := idemgrpc.Refusal(r.err); st.Code() != codes.Unavailable || reason != idemgrpc.ReasonStoreUnavailable {
				t.Fatalf("store down: %v %q (%s), want Unavailable, STORE_UNAVAILABLE", st.Code(), st.Message(), reason)
			}
			for _, secret := range []string{"leakyuser", "leakypass", "leakydb", "127.0.0.1", port} {
				if strings.Contains(st.Message(), secret) {
					t.Errorf("the client's message %q names %q", st.Message(), secret)
				}
			}
			if !strings.Contains(logged.String(), port) {
				t.Errorf("the server's log lacks the store's error: %q", logged.String())
			}
			if svc.runs.Load() != 0 {
				t.Error("handler ran without a claim")
			}
		})
	}
}
