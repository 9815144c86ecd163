package stress

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/idemgen/idemgen/internal/freeport"
)

// PatroniCluster is one etcd member and two Patroni-managed PostgreSQL
// nodes started by scripts/patroni.sh in a directory of the harness's own,
// so that it may kill the leader.
type PatroniCluster struct {
	// DSN names both nodes with target_session_attrs=read-write.
	DSN string

	dir, script string
	ports       []int
	mu          sync.Mutex
}

// StartPatroni starts the cluster in mode (async, sync or sync-strict).
func StartPatroni(ctx context.Context, mode string) (*PatroniCluster, error) {
	for _, b := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(b); err != nil && os.Getuid() != 0 {
			return nil, fmt.Errorf("%s: %w (install patroni and etcd-server)", b, ErrMissingServer)
		}
	}
	if _, err := pgBin(); err != nil {
		return nil, err
	}
	script, err := repoFile("scripts/patroni.sh")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-failover-patroni-")
	if err != nil {
		return nil, err
	}
	_ = os.Chmod(dir, 0o755) // the postgres user runs Patroni when we are root
	c := &PatroniCluster{dir: dir, script: script}
	out, err := c.run(ctx, "start", mode)
	c.ports = scriptPorts(dir)
	if err != nil {
		c.Stop()
		return nil, err
	}
	c.DSN, _ = strings.CutPrefix(out, "IDEM_PG_DSN=")
	if c.DSN == out {
		c.Stop()
		return nil, fmt.Errorf("scripts/patroni.sh start printed %q", out)
	}
	return c, nil
}

func (c *PatroniCluster) run(ctx context.Context, args ...string) (string, error) {
	args = append([]string{args[0], c.dir}, args[1:]...)
	cmd := exec.CommandContext(context.WithoutCancel(ctx), c.script, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/patroni.sh %s: %w\n%s", args[0], err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

func (c *PatroniCluster) do(ctx context.Context, verb string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.run(ctx, verb)
	return err
}

// CatchUp returns once the replica has received every WAL record the
// leader had written when it was called.
func (c *PatroniCluster) CatchUp(ctx context.Context) error { return c.do(ctx, "catchup") }

// KillLeader SIGKILLs the leader's Patroni and PostgreSQL.
func (c *PatroniCluster) KillLeader(ctx context.Context) error { return c.do(ctx, "kill") }

// WaitLeader returns once the other node leads and runs.
func (c *PatroniCluster) WaitLeader(ctx context.Context) error { return c.do(ctx, "wait") }

// Stop kills every process and removes the directory.
func (c *PatroniCluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.run(context.Background(), "stop")
	_ = os.RemoveAll(c.dir)
	freeport.Release(c.ports...)
}

// PatroniFailover runs pgstore (lease and transactional mode) on two
// PostgreSQL nodes managed by Patroni with one etcd member
// (scripts/patroni.sh; mode async, Patroni's default, or sync:
// synchronous_mode on), the pool on a DSN naming both with
// target_session_attrs=read-write, over four times the storm's keys. At
// 10% of the calls a call is held after its side effect, the replica
// catches up, and the leader (Patroni and PostgreSQL) is SIGKILLed;
// Patroni on the other node promotes it once the leader key expires (ttl
// 10s); the storm holds at 60% until it leads. Synchronous: every key
// executes once. Asynchronous: what the replica had not received is lost,
// as in pg-failover-async (Verify bounds and reports it); here the window
// is only the replication lag at the kill, with no stopped replication.
func PatroniFailover(mode string) Scenario {
	async := mode == "async"
	return killMidStorm(Scenario{
		Name:    "patroni-failover-" + mode,
		About:   "Patroni (etcd) leader SIGKILLed mid-storm, the replica promoted by Patroni (" + mode + ")",
		Applies: only("pg", "pg-tx"),
		Own: func(ctx context.Context) (*Owned, error) {
			c, err := StartPatroni(ctx, mode)
			if err != nil {
				return nil, err
			}
			return &Owned{Servers: Servers{PGDSN: c.DSN}, Value: c, Stop: c.Stop}, nil
		},
	}, midStormKill[*PatroniCluster]{
		holdAt:  0.6,
		mayLose: async,
		lostAll: async,
		window:  &windowLog{},
		before:  func(ctx context.Context, c *PatroniCluster) error { return c.CatchUp(ctx) },
		victim:  "leader",
		kill:    func(ctx context.Context, c *PatroniCluster) error { return c.KillLeader(ctx) },
		recover: func(ctx context.Context, c *PatroniCluster) (string, error) {
			return "replica promoted by Patroni", c.WaitLeader(ctx)
		},
	})
}
