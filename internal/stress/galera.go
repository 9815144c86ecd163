package stress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/internal/freeport"
)

// GaleraCluster is a three-node MariaDB Galera cluster started by
// scripts/galera.sh in a directory of the harness's own, so that it may
// kill a node.
type GaleraCluster struct {
	// DSN spreads its connections over every node (GaleraNet): what a
	// client sees behind a load balancer that sends each new connection to
	// the next live node. Its wsrep_sync_wait is 15, or
	// $IDEM_GALERA_SYNC_WAIT (0 reproduces Galera's default).
	DSN string
	// Nodes are the nodes' host:port, node 1 first.
	Nodes []string

	dir, script string
	ports       []int
	mu          sync.Mutex
}

// GaleraNet is the go-sql-driver/mysql network of GaleraDSN: its address is
// a comma-separated list of host:port, and each new connection goes to the
// next node in turn, skipping a node that refuses it.
const GaleraNet = "idem-galera"

var (
	galeraOnce sync.Once
	galeraNext atomic.Uint64
)

// GaleraDSN returns a DSN (user root, database idem) whose connections go
// to the nodes in turn (GaleraNet), with wsrep_sync_wait=syncWait: 15 makes
// each statement (read, update, delete, insert) first wait until its node
// has applied every write set the cluster committed before it; 0 is
// Galera's default (no wait: a node may answer from before a write another
// node committed).
func GaleraDSN(nodes []string, syncWait int) string {
	galeraOnce.Do(func() {
		mysql.RegisterDialContext(GaleraNet, func(ctx context.Context, addr string) (net.Conn, error) {
			nodes := strings.Split(addr, ",")
			first := int(galeraNext.Add(1))
			var errs []error
			for i := range nodes {
				d := net.Dialer{Timeout: time.Second}
				c, err := d.DialContext(ctx, "tcp", nodes[(first+i)%len(nodes)])
				if err == nil {
					return c, nil
				}
				errs = append(errs, err)
			}
			return nil, errors.Join(errs...)
		})
	})
	return "root@" + GaleraNet + "(" + strings.Join(nodes, ",") + ")/idem?wsrep_sync_wait=" + strconv.Itoa(syncWait)
}

// StartGalera starts a three-node Galera cluster (scripts/galera.sh start).
func StartGalera(ctx context.Context) (*GaleraCluster, error) {
	if _, err := os.Stat("/usr/lib/galera/libgalera_smm.so"); err != nil && os.Getuid() != 0 {
		return nil, fmt.Errorf("galera-4: %w (install mariadb-server and galera-4)", ErrMissingServer)
	}
	script, err := repoFile("scripts/galera.sh")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "idem-failover-galera-")
	if err != nil {
		return nil, err
	}
	_ = os.Chmod(dir, 0o755) // the mysql user runs the nodes when we are root
	g := &GaleraCluster{dir: dir, script: script}
	out, err := g.run(ctx, "start")
	g.ports = scriptPorts(dir)
	if err != nil {
		g.Stop()
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "IDEM_GALERA_DSNS="); ok {
			for _, d := range strings.Split(v, ",") {
				cfg, err := mysql.ParseDSN(d)
				if err == nil {
					g.Nodes = append(g.Nodes, cfg.Addr)
				}
			}
		}
	}
	if len(g.Nodes) != 3 {
		g.Stop()
		return nil, fmt.Errorf("scripts/galera.sh start printed %q", out)
	}
	syncWait := 15
	if v := os.Getenv("IDEM_GALERA_SYNC_WAIT"); v != "" {
		if syncWait, err = strconv.Atoi(v); err != nil {
			g.Stop()
			return nil, fmt.Errorf("IDEM_GALERA_SYNC_WAIT=%q: %w", v, err)
		}
	}
	g.DSN = GaleraDSN(g.Nodes, syncWait)
	return g, nil
}

func (g *GaleraCluster) run(ctx context.Context, args ...string) (string, error) {
	args = append([]string{args[0], g.dir}, args[1:]...)
	cmd := exec.CommandContext(context.WithoutCancel(ctx), g.script, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/galera.sh %s: %w\n%s", args[0], err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// Kill SIGKILLs node n (1..3); the other two keep the cluster's quorum.
func (g *GaleraCluster) Kill(ctx context.Context, n int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, err := g.run(ctx, "kill", strconv.Itoa(n))
	return err
}

// Stop kills every node and removes the directory.
func (g *GaleraCluster) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, _ = g.run(context.Background(), "stop")
	_ = os.RemoveAll(g.dir)
	freeport.Release(g.ports...)
}

// GaleraKill runs mysqlstore on a three-node Galera cluster
// (scripts/galera.sh), every connection to the next node in turn
// (GaleraDSN), so that the same key's claims meet on different nodes; at
// 10% of the calls the next call to make its side effect is held before
// its Complete, node 2 is SIGKILLed (its sessions die with it; the two
// others keep the quorum), and the held call let go; the storm holds at
// 60% until then. Lease mode: a claim's INSERT and a takeover's UPDATE
// conflict at certification across nodes (the loser gets a deadlock,
// error 1213, a transient store error, and looks again), and
// wsrep_sync_wait=15 (GaleraDSN) makes every statement wait until its node
// has applied what the cluster committed before it, so every key must
// execute once. (Without it, a Complete on a node that had not yet
// applied its claim's INSERT matched no row: ErrLeaseLost, the record left
// PROCESSING for its lease, the history not linearizable.)
func GaleraKill() Scenario {
	return killMidStorm(Scenario{
		Name:  "galera-kill",
		About: "MariaDB Galera, three nodes, connections spread over all; one node SIGKILLed mid-storm",
		// Transactional mode refuses Galera (mysqlstore.ErrGalera).
		Applies: only("mysql"),
		Own: func(ctx context.Context) (*Owned, error) {
			g, err := StartGalera(ctx)
			if err != nil {
				return nil, err
			}
			return &Owned{Servers: Servers{MySQLDSN: g.DSN}, Value: g, Stop: g.Stop}, nil
		},
	}, midStormKill[*GaleraCluster]{
		holdAt: 0.6,
		victim: "node 2",
		kill:   func(ctx context.Context, g *GaleraCluster) error { return g.Kill(ctx, 2) },
	})
}
