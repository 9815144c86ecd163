package stress

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/freeport"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// SentinelRedis is a Redis master, one replica and three Sentinels started
// by scripts/redis-sentinel.sh in a directory of the harness's own, so that
// it may kill the master.
type SentinelRedis struct {
	Sentinel Sentinel

	dir, script string
	ports       []int

	mu sync.Mutex
}

// StartSentinelRedis starts a master, its replica and three Sentinels.
func StartSentinelRedis(ctx context.Context) (*SentinelRedis, error) {
	for _, b := range []string{"redis-server", "redis-sentinel", "redis-cli"} {
		if _, err := exec.LookPath(b); err != nil && os.Getuid() != 0 {
			return nil, fmt.Errorf("%s: %w (install redis-server, redis-sentinel and redis-tools)", b, ErrMissingServer)
		}
	}
	script, err := repoFile("scripts/redis-sentinel.sh")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-failover-redis-")
	if err != nil {
		return nil, err
	}
	s := &SentinelRedis{dir: dir, script: script}
	out, err := s.run(ctx, "start")
	s.ports = scriptPorts(dir)
	if err != nil {
		s.Stop()
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "IDEM_REDIS_SENTINEL_MASTER":
			s.Sentinel.Master = v
		case "IDEM_REDIS_SENTINEL_ADDRS":
			s.Sentinel.Addrs = strings.Split(v, ",")
		}
	}
	if s.Sentinel.Master == "" || len(s.Sentinel.Addrs) == 0 {
		s.Stop()
		return nil, fmt.Errorf("scripts/redis-sentinel.sh start printed %q", out)
	}
	return s, nil
}

func (s *SentinelRedis) run(ctx context.Context, verb string) (string, error) {
	cmd := exec.CommandContext(context.WithoutCancel(ctx), s.script, verb, s.dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/redis-sentinel.sh %s: %w\n%s", verb, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// KillMaster SIGKILLs the server the Sentinels name as the master.
func (s *SentinelRedis) KillMaster(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.run(ctx, "kill")
	return err
}

// WaitMaster returns the address of the master once the Sentinels name one
// that answers as a master.
func (s *SentinelRedis) WaitMaster(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, err := s.run(ctx, "wait")
	if err != nil {
		return "", err
	}
	addr, _ := strings.CutPrefix(out, "IDEM_REDIS_ADDR=")
	return addr, nil
}

// Stop kills every server and Sentinel and removes the directory.
func (s *SentinelRedis) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.run(context.Background(), "stop")
	_ = os.RemoveAll(s.dir)
	freeport.Release(s.ports...)
}

// OpenSentinel returns a client of the master the Sentinels name, which
// asks them again when the master fails (redis.NewFailoverClient), after a
// PING.
func OpenSentinel(ctx context.Context, sn *Sentinel) (*redis.Client, error) {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sn.Master, SentinelAddrs: sn.Addrs, PoolSize: 64,
		DialTimeout: time.Second})
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis master %s behind sentinels %v: %w", sn.Master, sn.Addrs, err)
	}
	return c, nil
}

// RedisSentinelBackend is redisstore (prefix "stress:") on a failover
// client of the scenario's own Sentinels (Servers.Sentinel). It may lose
// records (Redis replicates asynchronously).
func RedisSentinelBackend() Backend {
	return Backend{Name: "redis-sentinel", Open: func(ctx context.Context, srv Servers) (*Handle, error) {
		if srv.Sentinel == nil {
			return nil, fmt.Errorf("redis-sentinel: the scenario starts no Sentinels")
		}
		c, err := OpenSentinel(ctx, srv.Sentinel)
		if err != nil {
			return nil, err
		}
		s := redisstore.New(c, redisstore.WithPrefix("stress:"))
		return &Handle{Store: s, Close: func() { _ = c.Close() }, MayLose: true, Lose: RedisLoser(c, s)}, nil
	}}
}

// scriptPorts reads the ports a server script (scripts/redis-sentinel.sh,
// galera.sh, patroni.sh) reserved for its servers, written to DIR/ports as
// it starts them, so that Stop releases them even when the start failed.
func scriptPorts(dir string) []int {
	b, err := os.ReadFile(dir + "/ports")
	if err != nil {
		return nil
	}
	var ports []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			ports = append(ports, p)
		}
	}
	return ports
}
