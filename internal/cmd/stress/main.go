// Command stress is the duplicate storm with faults: it drives the generated
// wrapper of the example billing service with many workers over many keys,
// every key retried several times concurrently, on each store and scenario,
// counts real executions per key with an independent counter, checks the
// store's history for linearizability (porcupine), and prints one line per
// scenario. It exits 1 if any assertion failed.
//
//	go run ./internal/cmd/stress                      # memory, plus Redis/PostgreSQL (lease and
//	                                                  # transactional mode)/tiered/MySQL (both
//	                                                  # modes) when $IDEM_REDIS_ADDR /
//	                                                  # $IDEM_PG_DSN / $IDEM_REDIS_CLUSTER_ADDRS /
//	                                                  # $IDEM_MYSQL_DSN are set
//
// The fault scenarios that kill or restart a server (redis-kill, pg-restart,
// cluster-failover, cluster-reshard, mysql-kill) start a server of their own
// for each run (redis-server; PostgreSQL through scripts/pg.sh; a Redis
// Cluster through scripts/redis-cluster.sh; MariaDB through
// scripts/mariadb.sh) and stop it afterwards; the harness never signals a server
// it did not start.
//
//	go run ./internal/cmd/stress -stores=mem -scenarios=plain,stall
//	scripts/with-services.sh go run ./internal/cmd/stress   # with throwaway servers
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/mysqlstress"
)

func main() {
	var (
		stores    = flag.String("stores", "", "comma-separated stores: mem, redis, pg, pg-tx, tiered, redis-cluster, tiered-cluster, mysql, mysql-tx (default: mem, and every store whose server env var is set)")
		scenarios = flag.String("scenarios", "", "comma-separated scenarios (default: all): "+names())
		short     = flag.Bool("short", false, "the shortened storm that go test runs")
		seed      = flag.Uint64("seed", 0, "seed of the call plan and injected failures (0: random)")
		viz       = flag.String("viz", os.TempDir(), "directory for the porcupine visualization of a non-linearizable history")
		calls     = flag.Int("calls", 0, "Pay calls per scenario (default 10000; 2000 with -short)")
		keys      = flag.Int("keys", 0, "keys per scenario (default 100; 50 with -short)")
		workers   = flag.Int("workers", 0, "concurrent callers (default 32; 16 with -short)")
		list      = flag.Bool("list", false, "list the scenarios and exit")
	)
	flag.Parse()
	if *list {
		for _, s := range stress.Scenarios() {
			fmt.Printf("%-20s %s\n", s.Name, s.About)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ok, err := run(ctx, *stores, *scenarios, stress.Options{Short: *short, Seed: *seed, VizDir: *viz, Calls: *calls, Keys: *keys, Workers: *workers})
	if err != nil {
		fmt.Fprintln(os.Stderr, "stress:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func names() string {
	var n []string
	for _, s := range stress.Scenarios() {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

func backends(list string) ([]stress.Backend, error) {
	dsn, addr := os.Getenv("IDEM_PG_DSN"), os.Getenv("IDEM_REDIS_ADDR")
	myDSN := os.Getenv("IDEM_MYSQL_DSN")
	var cluster []string
	if v := os.Getenv("IDEM_REDIS_CLUSTER_ADDRS"); v != "" {
		cluster = strings.Split(v, ",")
	}
	var want []string
	if list == "" {
		want = []string{"mem"}
		if addr != "" {
			want = append(want, "redis")
		}
		if dsn != "" {
			want = append(want, "pg", "pg-tx")
		}
		if dsn != "" && addr != "" {
			want = append(want, "tiered")
		}
		if cluster != nil {
			want = append(want, "redis-cluster")
		}
		if dsn != "" && cluster != nil {
			want = append(want, "tiered-cluster")
		}
		if myDSN != "" {
			want = append(want, "mysql", "mysql-tx")
		}
	} else {
		want = strings.Split(list, ",")
	}
	var bs []stress.Backend
	for _, name := range want {
		switch strings.TrimSpace(name) {
		case "mem", "memory":
			bs = append(bs, stress.Memory())
		case "redis":
			if addr == "" {
				return nil, fmt.Errorf("store redis needs $IDEM_REDIS_ADDR (run under scripts/with-services.sh)")
			}
			bs = append(bs, stress.Redis(addr))
		case "pg", "postgres":
			if dsn == "" {
				return nil, fmt.Errorf("store pg needs $IDEM_PG_DSN (run under scripts/with-services.sh)")
			}
			bs = append(bs, postgres(dsn))
		case "pg-tx":
			if dsn == "" {
				return nil, fmt.Errorf("store pg-tx needs $IDEM_PG_DSN (run under scripts/with-services.sh)")
			}
			bs = append(bs, postgresTx(dsn))
		case "tiered":
			if dsn == "" || addr == "" {
				return nil, fmt.Errorf("store tiered needs $IDEM_PG_DSN and $IDEM_REDIS_ADDR (run under scripts/with-services.sh)")
			}
			bs = append(bs, tiered(dsn, addr))
		case "redis-cluster":
			if cluster == nil {
				return nil, fmt.Errorf("store redis-cluster needs $IDEM_REDIS_CLUSTER_ADDRS (run under scripts/with-services.sh)")
			}
			bs = append(bs, stress.RedisCluster(cluster))
		case "tiered-cluster":
			if dsn == "" || cluster == nil {
				return nil, fmt.Errorf("store tiered-cluster needs $IDEM_PG_DSN and $IDEM_REDIS_CLUSTER_ADDRS (run under scripts/with-services.sh)")
			}
			bs = append(bs, tieredCluster(dsn, cluster))
		case "mysql", "mysql-tx":
			if myDSN == "" {
				return nil, fmt.Errorf("store %s needs $IDEM_MYSQL_DSN (run under scripts/with-services.sh)", name)
			}
			if strings.TrimSpace(name) == "mysql" {
				bs = append(bs, mysqlstress.MySQL(myDSN))
			} else {
				bs = append(bs, mysqlstress.MySQLTx(myDSN))
			}
		default:
			return nil, fmt.Errorf("unknown store %q (want mem, redis, pg, pg-tx, tiered, redis-cluster, tiered-cluster, mysql, mysql-tx)", name)
		}
	}
	return bs, nil
}

func run(ctx context.Context, storeList, scenarioList string, opt stress.Options) (bool, error) {
	bs, err := backends(storeList)
	if err != nil {
		return false, err
	}
	scs := stress.Scenarios()
	if scenarioList != "" {
		scs = nil
		for _, name := range strings.Split(scenarioList, ",") {
			sc, ok := stress.Find(strings.TrimSpace(name))
			if !ok {
				return false, fmt.Errorf("unknown scenario %q (want %s)", name, names())
			}
			scs = append(scs, sc)
		}
	}
	fmt.Printf("idemgen stress: %s, GOMAXPROCS=%d, %s\n", runtime.Version(), runtime.GOMAXPROCS(0), time.Now().Format(time.DateTime))
	start := time.Now()
	defer func() { fmt.Printf("idemgen stress: done in %v\n", time.Since(start).Round(time.Second/10)) }()
	allOK := true
	for _, b := range bs {
		for _, sc := range scs {
			if sc.Applies != nil && !sc.Applies(b.Name) {
				continue
			}
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			res, err := stress.Run(ctx, sc, b, opt)
			if err != nil {
				fmt.Printf("%-18s %-7s ERROR %v\n", sc.Name, b.Name, err)
				allOK = false
				continue
			}
			fmt.Println(res.Line())
			for i, f := range res.Failures {
				if i == 20 {
					fmt.Printf("    ... %d more\n", len(res.Failures)-i)
					break
				}
				fmt.Println("    FAIL:", f)
			}
			allOK = allOK && res.OK()
		}
	}
	return allOK, nil
}
