package stress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemgen/idemgen/internal/freeport"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/redisstore"
)

// RedisCluster is redisstore through a *redis.ClusterClient of the Redis
// Cluster whose nodes are addrs, or of the scenario's own cluster. Like
// plain Redis it may lose records (a failover to a replica that had not
// received them).
func RedisCluster(addrs []string) Backend {
	return Backend{Name: "redis-cluster", Open: func(ctx context.Context, srv Servers) (*Handle, error) {
		c, err := OpenRedisCluster(ctx, pickAddrs(srv.RedisClusterAddrs, addrs))
		if err != nil {
			return nil, err
		}
		s := redisstore.New(c, redisstore.WithPrefix("stress:"))
		return &Handle{Store: s, Close: func() { _ = c.Close() }, MayLose: true, Lose: RedisLoser(c, s)}, nil
	}}
}

func pickAddrs(override, def []string) []string {
	if len(override) > 0 {
		return override
	}
	return def
}

// OpenRedisCluster returns a client of the Redis Cluster whose nodes are
// addrs, after a PING of every master. Its retry budget is go-redis'
// default: 3 redirects or retries per command, with a backoff of 8–512ms.
//
// It reloads the slot map every second (ClusterStateReloadInterval). With
// go-redis' default of 60s, a client whose master was SIGKILLed keeps
// sending that master's slots to the dead address for up to a minute after
// the replica took over: a refused connection, unlike MOVED, does not make
// go-redis reload the map (seen in the cluster-failover scenario: a third
// of the keys failed until the end of a 35s run).
func OpenRedisCluster(ctx context.Context, addrs []string) (*redis.ClusterClient, error) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 64, ClusterStateReloadInterval: time.Second})
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Ping(ctx).Err()
	}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis cluster at %v: %w", addrs, err)
	}
	return c, nil
}

// ClusterServer is a Redis Cluster the harness started with
// scripts/redis-cluster.sh (3 masters, 1 replica each, cluster-node-timeout
// 2s) in a directory of its own, so that it may kill a master and move
// slots. Every node's PID is in DIR/PORT/redis.pid.
type ClusterServer struct {
	dir, script string
	addrs       []string
	killed      map[string]bool
}

// StartCluster starts a Redis Cluster of the harness's own.
func StartCluster(ctx context.Context) (*ClusterServer, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server: %w (install redis-server, or run under scripts/with-services.sh, which installs it)", ErrMissingServer)
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, fmt.Errorf("redis-cli: %w (install redis-server, or run under scripts/with-services.sh, which installs it)", ErrMissingServer)
	}
	script, err := repoFile("scripts/redis-cluster.sh")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-stress-cluster-")
	if err != nil {
		return nil, err
	}
	s := &ClusterServer{dir: dir, script: script, killed: map[string]bool{}}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script, "start", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("scripts/redis-cluster.sh start: %w\n%s", err, stderr.String())
	}
	line := strings.TrimSpace(string(out))
	list, ok := strings.CutPrefix(line, "IDEM_REDIS_CLUSTER_ADDRS=")
	if !ok {
		s.Stop()
		return nil, fmt.Errorf("scripts/redis-cluster.sh start printed %q", line)
	}
	s.addrs = strings.Split(list, ",")
	return s, nil
}

// Addrs are host:port of every node.
func (s *ClusterServer) Addrs() []string { return s.addrs }

// Stop ends every node (scripts/redis-cluster.sh stop) and removes the
// directory.
func (s *ClusterServer) Stop() {
	_ = exec.Command(s.script, "stop", s.dir).Run()
	_ = os.RemoveAll(s.dir)
	for _, a := range s.addrs {
		_, port, _ := net.SplitHostPort(a)
		if p, err := strconv.Atoi(port); err == nil {
			freeport.Release(p, p+10000) // and the cluster bus
		}
	}
}

type clusterNode struct {
	id, addr string
	master   bool
	slots    int
}

// nodes returns the cluster's live nodes as a live node sees them, masters
// (with slots) first, by address.
func (s *ClusterServer) nodes(ctx context.Context) ([]clusterNode, error) {
	var last error
	for _, a := range s.addrs {
		if s.killed[a] {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: a, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
		txt, err := c.ClusterNodes(ctx).Result()
		_ = c.Close()
		if err != nil {
			last = err
			continue
		}
		var ns []clusterNode
		for _, l := range strings.Split(strings.TrimSpace(txt), "\n") {
			f := strings.Fields(l)
			if len(f) < 8 || strings.Contains(f[2], "fail") {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			n := clusterNode{id: f[0], addr: addr, master: strings.Contains(f[2], "master")}
			for _, r := range f[8:] {
				if strings.HasPrefix(r, "[") { // a slot in migration
					continue
				}
				lo, hi, isRange := strings.Cut(r, "-")
				a, _ := strconv.Atoi(lo)
				b := a
				if isRange {
					b, _ = strconv.Atoi(hi)
				}
				n.slots += b - a + 1
			}
			ns = append(ns, n)
		}
		slices.SortFunc(ns, func(a, b clusterNode) int {
			if a.master != b.master {
				if a.master {
					return -1
				}
				return 1
			}
			return strings.Compare(a.addr, b.addr)
		})
		return ns, nil
	}
	return nil, fmt.Errorf("no live node answered CLUSTER NODES: %w", last)
}

// KillMaster SIGKILLs the master that serves the most slots and returns its
// address and how many bytes of its replication stream its replica had not
// acknowledged just before (INFO replication: master_repl_offset minus the
// replica's offset; -1 when unknown). The replica takes over after
// cluster-node-timeout; records it had not received yet are lost.
func (s *ClusterServer) KillMaster(ctx context.Context) (string, int64, error) {
	ns, err := s.nodes(ctx)
	if err != nil {
		return "", 0, err
	}
	var victim clusterNode
	for _, n := range ns {
		if n.master && n.slots > victim.slots {
			victim = n
		}
	}
	if victim.slots == 0 {
		return "", 0, errors.New("no master serves a slot")
	}
	lag := replLag(ctx, victim.addr)
	_, port, _ := strings.Cut(victim.addr, ":")
	b, err := os.ReadFile(filepath.Join(s.dir, port, "redis.pid"))
	if err != nil {
		return "", 0, fmt.Errorf("master %s was not started by the harness: %w", victim.addr, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return "", 0, fmt.Errorf("pid file of %s: %w", victim.addr, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return "", 0, fmt.Errorf("kill master %s (pid %d): %w", victim.addr, pid, err)
	}
	s.killed[victim.addr] = true
	for syscall.Kill(pid, 0) == nil { // gone within milliseconds
		time.Sleep(5 * time.Millisecond)
	}
	return victim.addr, lag, nil
}

// replLag is master_repl_offset of the master at addr minus the offset its
// first replica acknowledged, or -1.
func replLag(ctx context.Context, addr string) int64 {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return -1
	}
	var master, replica int64 = -1, -1
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "master_repl_offset:"); ok {
			master, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(l, "slave0:"); ok {
			for _, f := range strings.Split(v, ",") {
				if o, ok := strings.CutPrefix(f, "offset="); ok {
					replica, _ = strconv.ParseInt(o, 10, 64)
				}
			}
		}
	}
	if master < 0 || replica < 0 {
		return -1
	}
	return master - replica
}

// WaitHealthy returns once every live node reports cluster_state:ok with
// all 16384 slots served by a master that is not failing and assigns no
// slot to a killed node (its replica took them over), or after timeout.
func (s *ClusterServer) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var why string
	for {
		if why = s.unhealthy(ctx); why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster is not healthy after %v: %s", timeout, why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *ClusterServer) unhealthy(ctx context.Context) string {
	for _, a := range s.addrs {
		if s.killed[a] {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: a, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
		info, err := c.ClusterInfo(ctx).Result()
		_ = c.Close()
		if err != nil {
			return a + ": " + err.Error()
		}
		for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_slots_pfail:0", "cluster_slots_fail:0"} {
			if !strings.Contains(info, want+"\r\n") {
				return a + " lacks " + want
			}
		}
		// Until its peers mark a killed master failing (cluster-node-timeout),
		// the state above is still ok: wait until no live node assigns it
		// a slot.
		c = redis.NewClient(&redis.Options{Addr: a, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
		txt, err := c.ClusterNodes(ctx).Result()
		_ = c.Close()
		if err != nil {
			return a + ": " + err.Error()
		}
		for _, l := range strings.Split(strings.TrimSpace(txt), "\n") {
			f := strings.Fields(l)
			if len(f) < 8 {
				continue
			}
			if addr, _, _ := strings.Cut(f[1], "@"); s.killed[addr] && len(f) > 8 {
				return a + " still assigns slots to the killed " + addr
			}
		}
	}
	return ""
}

// Reshard moves n slots from the master that serves the most to the one
// that serves the fewest (redis-cli --cluster reshard: each slot is set
// MIGRATING/IMPORTING, its keys are MIGRATEd, then the slot is assigned)
// and returns the two masters' addresses.
func (s *ClusterServer) Reshard(ctx context.Context, n int) (from, to string, err error) {
	ns, err := s.nodes(ctx)
	if err != nil {
		return "", "", err
	}
	var src, dst clusterNode
	for _, x := range ns {
		if !x.master || x.slots == 0 {
			continue
		}
		if src.id == "" || x.slots > src.slots {
			src = x
		}
		if dst.id == "" || x.slots < dst.slots {
			dst = x
		}
	}
	if src.id == "" || src.id == dst.id {
		return "", "", fmt.Errorf("reshard: need two masters with slots, have %+v", ns)
	}
	cmd := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", src.addr,
		"--cluster-from", src.id, "--cluster-to", dst.id, "--cluster-slots", strconv.Itoa(n),
		"--cluster-yes", "--cluster-pipeline", "100")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tail := string(out)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return src.addr, dst.addr, fmt.Errorf("redis-cli --cluster reshard: %w\n%s", err, tail)
	}
	return src.addr, dst.addr, nil
}

// ClusterFailover SIGKILLs the Redis Cluster master that serves the most
// slots at 30% of the calls (the storm holds at 80% until the cluster is
// healthy again); its replica is promoted after cluster-node-timeout (2s).
// Calls on that master's slots fail with store errors until go-redis sees
// the new master (its retry budget is far shorter than a failover);
// records the replica had not received are lost. Tiered must keep one
// execution per key (PostgreSQL decides every claim); plain redisstore
// may execute a key again, reported as lost-record.
func ClusterFailover() Scenario {
	return Scenario{
		Name:       "cluster-failover",
		About:      "a Redis Cluster master SIGKILLed mid-run, its replica promoted",
		Applies:    only("redis-cluster", "tiered-cluster"),
		OwnCluster: true,
		Configure: func(s *Storm) {
			faulty(s)
			s.Faults, s.HoldAt = 1, 0.8
			s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
				defer env.FaultDone()
				if err := env.WaitProgress(ctx, 0.3); err != nil {
					return fmt.Errorf("cluster-failover: the storm ended before 30%% of its calls")
				}
				t0 := time.Now()
				addr, lag, err := env.Cluster.KillMaster(ctx)
				if err != nil {
					return fmt.Errorf("cluster-failover: %w", err)
				}
				env.LostAll()
				if err := env.Cluster.WaitHealthy(context.WithoutCancel(ctx), 60*time.Second); err != nil {
					return fmt.Errorf("cluster-failover: %w", err)
				}
				env.Note("master %s SIGKILLed at %v (call %d; its replica %d bytes behind), replica promoted, cluster ok %v later",
					addr, env.Elapsed()-time.Since(t0).Round(time.Millisecond), int(0.3*float64(env.total)), lag, time.Since(t0).Round(time.Millisecond))
				return nil
			})
		},
	}
}

// ClusterReshard moves 1000 slots between two masters of the Redis Cluster
// (redis-cli --cluster reshard) from 20% of the calls on; the storm holds
// at 90% until the move is over. go-redis follows MOVED and ASK: no call
// may fail (store errors are failures here) and no record may be lost.
func ClusterReshard() Scenario {
	return Scenario{
		Name:       "cluster-reshard",
		About:      "1000 slots moved between masters (redis-cli --cluster reshard) mid-run",
		Applies:    only("redis-cluster", "tiered-cluster"),
		OwnCluster: true,
		Configure: func(s *Storm) {
			s.Faults, s.HoldAt = 1, 0.9
			s.Background = append(s.Background, func(ctx context.Context, env *Env) error {
				defer env.FaultDone()
				if err := env.WaitProgress(ctx, 0.2); err != nil {
					return fmt.Errorf("cluster-reshard: the storm ended before 20%% of its calls")
				}
				t0 := time.Now()
				from, to, err := env.Cluster.Reshard(context.WithoutCancel(ctx), 1000)
				if err != nil {
					return fmt.Errorf("cluster-reshard: %w", err)
				}
				env.Note("1000 slots moved %s -> %s from %v (call %d) to call %d, in %v", from, to,
					env.Elapsed()-time.Since(t0).Round(time.Millisecond), int(0.2*float64(env.total)), env.Issued(), time.Since(t0).Round(time.Millisecond))
				return nil
			})
		},
	}
}
