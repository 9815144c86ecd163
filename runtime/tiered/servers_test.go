package tiered_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/freeport"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// pgStore returns a pgstore on the test PostgreSQL server, on a table of
// this package's own.
func pgStore(t testing.TB) *pgstore.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := pgstore.New(pool, pgstore.WithTable("idem_tiered_test"))
	require.NoError(t, s.Migrate(t.Context()))
	return s
}

// downPool is a pool whose server is down (an address of this machine on
// which nothing listens).
func downPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@"+addr+"/idem?sslmode=disable")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// pgTxStore returns a pgstore in transactional mode on the test PostgreSQL
// server, on a table of this package's own.
func pgTxStore(t testing.TB) *pgstore.TxStore {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := pgstore.NewTx(pool, pgstore.WithTable("idem_tiered_tx_test"))
	require.NoError(t, s.Migrate(t.Context()))
	return s
}

// redisServer is a redis-server of the test's own, which it may kill.
type redisServer struct {
	t    testing.TB
	bin  string
	dir  string
	args []string
	Addr string
	cmd  *exec.Cmd
	exit chan struct{}
}

// startRedis starts a redis-server on a free port of 127.0.0.1, with no
// persistence and the extra arguments args, and kills it when t ends. It
// fails under CI=true when redis-server is not installed, and skips
// otherwise.
func startRedis(t testing.TB, args ...string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server is not installed (scripts/redis.sh installs it): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// Below the ephemeral range: Start restarts the server on its port,
	// and no outgoing connection may take it meanwhile.
	p, err := freeport.Pick(0)
	require.NoError(t, err)
	t.Cleanup(func() { freeport.Release(p) })
	addr := "127.0.0.1:" + strconv.Itoa(p)
	r := &redisServer{t: t, bin: bin, dir: t.TempDir(), args: args, Addr: addr}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// Start starts (or restarts) the server on its port and waits for PING.
func (r *redisServer) Start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.Addr)
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--daemonize", "no"}, r.args...)
	log, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(r.t, err)
	defer log.Close()
	cmd := exec.Command(r.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(r.t, cmd.Start())
	r.cmd, r.exit = cmd, make(chan struct{})
	go func(exit chan struct{}) { _ = cmd.Wait(); close(exit) }(r.exit)

	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case <-r.exit:
			b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			r.t.Fatalf("redis-server exited: %s", b)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %s does not answer: %v", r.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop freezes the server (SIGSTOP): connections stay open, nothing answers.
func (r *redisServer) Stop() { require.NoError(r.t, r.cmd.Process.Signal(syscall.SIGSTOP)) }

// Cont resumes a frozen server (SIGCONT).
func (r *redisServer) Cont() { require.NoError(r.t, r.cmd.Process.Signal(syscall.SIGCONT)) }

// Kill sends SIGKILL to the server this test started, and waits for it.
func (r *redisServer) Kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exit
	r.cmd = nil
}

// info returns one field of INFO.
func info(t testing.TB, c redis.UniversalClient, field string) string {
	t.Helper()
	s, err := c.Info(t.Context()).Result()
	require.NoError(t, err)
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO has no %s", field)
	return ""
}

// countingStore counts the calls that reach a store.
type countingStore struct {
	idem.Store
	claims atomic.Int64
}

func (c *countingStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, req)
}

// countingTxStore counts the claims, in and out of a transaction, that
// reach a store in transactional mode.
type countingTxStore struct {
	idem.TxStore
	claims atomic.Int64
}

func (c *countingTxStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	c.claims.Add(1)
	return c.TxStore.Claim(ctx, req)
}

func (c *countingTxStore) ClaimTx(ctx context.Context, req idem.ClaimRequest, wait time.Duration) (idem.Claim, idem.Txn, error) {
	c.claims.Add(1)
	return c.TxStore.ClaimTx(ctx, req, wait)
}

func id(i int) string { return fmt.Sprintf("order-%d", i) }
