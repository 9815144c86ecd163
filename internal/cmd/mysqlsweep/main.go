// Command mysqlsweep measures mysqlstore's Sweep beside the load (issue
// 23): a table of -records live records (10⁶ by default) and a tenth more
// that expired; the expired tenth is removed by each kind of expiry in
// turn (loaded again before each), while one caller makes first calls
// (Claim and Complete of a new key, lease mode) on the same table. For each
// expiry it prints the rows removed per second and the latency of the
// claims that began while it ran, as ratios to a window of the same calls
// without it measured just before, in the same run.
//
//	IDEM_MYSQL_DURABLE=1 scripts/with-services.sh go run ./internal/cmd/mysqlsweep [-records N] [-window D] [-paced 1000:0.05:0s,...] [-loop=false]
//
// Expiries: "loop", Sweep(DefaultSweepBatch) again and again until it
// removes less (a sweeper without pacing that fell behind), and "paced", an
// idem.Sweeper of each -paced setting (batch:duty cycle:pause; the
// default is NewSweeper's own), its rounds back to back until one ends
// with nothing left. MariaDB (or MySQL) comes from $IDEM_MYSQL_DSN; the
// server's version and commit flushing are printed with the results.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/internal/sweepbench"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

const (
	op      = "orders.Pay"
	bodyLen = 200
	// digits is a derived table of the digits 0 to 9.
	digits = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 " +
		"UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
)

func main() {
	records := flag.Int("records", 1_000_000, "live records in the table")
	window := flag.Duration("window", 10*time.Second, "the shortest window of calls, with and without expiry")
	paced := flag.String("paced", sweepbench.DefaultPacing,
		"paced sweepers to measure, batch:duty:pause separated by commas (idem.WithSweepBatch, WithSweepDutyCycle, WithSweepPause)")
	loop := flag.Bool("loop", true, "measure the bare loop of Sweep too")
	keep := flag.Bool("keep", false, "keep the table")
	flag.Parse()
	var ps []sweepbench.Pacing
	var err error
	if *paced != "" {
		ps, err = sweepbench.ParsePacing(*paced)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mysqlsweep:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err = run(ctx, *records, *window, ps, *loop, *keep)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mysqlsweep:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, records int, window time.Duration, ps []sweepbench.Pacing, loop, keep bool) error {
	dsn := os.Getenv("IDEM_MYSQL_DSN")
	if dsn == "" {
		return errors.New("$IDEM_MYSQL_DSN is unset: run under scripts/with-services.sh (or scripts/mariadb.sh start DIR)")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	cfg.MaxAllowedPacket = 0
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	var version string
	var flush int
	if err := db.QueryRowContext(ctx, "SELECT VERSION(), @@innodb_flush_log_at_trx_commit").Scan(&version, &flush); err != nil {
		return err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	table := "idem_sweepbench_" + hex.EncodeToString(b)
	s := mysqlstore.New(db, mysqlstore.WithTable(table))
	if err := s.Migrate(ctx); err != nil {
		return err
	}
	if !keep {
		defer func() { _, _ = db.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+s.Table()) }()
	}
	start := time.Now()
	if err := load(ctx, db, s.Table(), 0, records, false); err != nil {
		return err
	}
	fmt.Printf("server %s, innodb_flush_log_at_trx_commit=%d; table %s: %d live records loaded in %.1fs\n",
		version, flush, table, records, time.Since(start).Seconds())

	type mode struct {
		name string
		run  func(context.Context) (int, error)
	}
	var modes []mode
	if loop {
		modes = append(modes, mode{"loop, Sweep(1000) until done", func(ctx context.Context) (int, error) { return sweepbench.Loop(ctx, s, mysqlstore.DefaultSweepBatch) }})
	}
	for _, p := range ps {
		modes = append(modes, mode{"Sweeper " + p.String(), func(ctx context.Context) (int, error) { return sweepbench.Paced(ctx, p, s) }})
	}
	expired := records / 10
	var rows []string
	seq := 0
	for i, m := range modes {
		// A tenth more, expired, under keys of their own.
		if err := load(ctx, db, s.Table(), records+i*expired, expired, true); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+s.Table()); err != nil {
			return err
		}
		if err := (idem.SystemClock{}).Sleep(ctx, 3*time.Second); err != nil {
			return err
		}
		base, err := calls(ctx, s, &seq, window, nil)
		if err != nil {
			return err
		}
		done := make(chan struct{})
		var (
			removed int
			took    time.Duration
			serr    error
		)
		t0 := time.Now()
		go func() {
			defer close(done)
			removed, serr = m.run(ctx)
			took = time.Since(t0)
		}()
		with, err := calls(ctx, s, &seq, window, done)
		<-done
		if err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("%s: %w", m.name, serr)
		}
		during := pick(with, true)
		bc, dc := summarize(pick(base, false), func(x sample) time.Duration { return x.claim }), summarize(during, func(x sample) time.Duration { return x.claim })
		bf, df := summarize(pick(base, false), func(x sample) time.Duration { return x.first }), summarize(during, func(x sample) time.Duration { return x.first })
		rows = append(rows, fmt.Sprintf("| %s | %d | %.2fs | %.0f | %d / %d | %s / %s | %s / %s | %s | %s / %s | %s |",
			m.name, removed, took.Seconds(), float64(removed)/took.Seconds(), len(base), len(during),
			ms(bc.p50), ms(dc.p50), ms(bc.p99), ms(dc.p99), ratio(dc.p99, bc.p99),
			ms(bf.p50), ms(df.p50), ratio(df.p99, bf.p99)))
	}
	fmt.Printf("\n%d live records + %d expired, removed by each expiry while one caller makes first calls (lease mode); "+
		"without = a %v window just before; during = the calls that began while the expiry ran (ms)\n\n", records, expired, window)
	fmt.Println("| expiry | removed | took | rows/s | calls without / during | claim p50 without / during | claim p99 without / during | claim p99 ratio | first call p50 without / during | first call p99 ratio |")
	fmt.Println("|---|---:|---:|---:|---|---|---|---:|---|---:|")
	for _, r := range rows {
		fmt.Println(r)
	}
	return nil
}

// load inserts n records under the keys from+1 … from+n, in statements of
// 10⁵: final outcomes of a bodyLen-byte body, live for a day, or expired a
// second ago (expired).
func load(ctx context.Context, db *sql.DB, table string, from, n int, expired bool) error {
	expires := "t.now + 86400000000"
	if expired {
		expires = "t.now - 1000000"
	}
	const step = 100000
	for at := 0; at < n; at += step {
		_, err := db.ExecContext(ctx, `INSERT INTO `+table+` (idem_key, token, lease_until, expires_at, created_at, status,
	fingerprint, tenant, op, key_text, body)
SELECT UNHEX(SHA2(i, 256)), i, t.now, `+expires+`, t.now - 1000000, 2, UNHEX(SHA2(-i, 256)), 'tenant', ?, CAST(i AS CHAR), REPEAT('x', ?)
FROM (SELECT ? + 1 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS i
	FROM `+digits+` a, `+digits+` b, `+digits+` c, `+digits+` e, `+digits+` f) s,
	(SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS now) t
WHERE i <= ?`, op, bodyLen, from+at, from+min(at+step, n))
		if err != nil {
			return err
		}
	}
	return nil
}

type sample struct {
	claim, first time.Duration
	during       bool
}

// calls makes first calls of new keys, one at a time, until window has
// passed and done (if any) is closed; a call is during the expiry if done
// was open when it began.
func calls(ctx context.Context, s *mysqlstore.Store, seq *int, window time.Duration, done <-chan struct{}) ([]sample, error) {
	body := []byte(strings.Repeat("y", bodyLen))
	var out []sample
	err := sweepbench.Window(window, done, func(during bool) error {
		*seq++
		k, err := idem.NewKey("tenant", op, "new", strconv.Itoa(*seq))
		if err != nil {
			return err
		}
		t0 := time.Now()
		c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: idem.Token(*seq), Lease: time.Minute, TTL: 24 * time.Hour})
		claim := time.Since(t0)
		if err != nil {
			return err
		}
		if !c.Claimed {
			return fmt.Errorf("key %s not claimed", k.Hex())
		}
		if err := s.Complete(ctx, k, idem.Token(*seq), idem.Outcome{Status: idem.StatusSucceeded, Body: body}, 24*time.Hour); err != nil {
			return err
		}
		out = append(out, sample{claim: claim, first: time.Since(t0), during: during})
		return nil
	})
	return out, err
}

func pick(ss []sample, duringOnly bool) []sample {
	var out []sample
	for _, s := range ss {
		if s.during || !duringOnly {
			out = append(out, s)
		}
	}
	return out
}

type stats struct{ p50, p99 time.Duration }

func summarize(ss []sample, f func(sample) time.Duration) stats {
	d := make([]time.Duration, len(ss))
	for i, s := range ss {
		d[i] = f(s)
	}
	p50, p99 := sweepbench.Percentiles(d)
	return stats{p50, p99}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}
