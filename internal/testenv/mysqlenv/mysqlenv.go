// Package mysqlenv connects the tests to the throwaway MariaDB server that
// scripts/with-services.sh starts (testenv.MySQLDSN). It is a package of
// its own so that the nested modules that import testenv need no MySQL
// driver.
package mysqlenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// StoreTable connects to the test MariaDB server and migrates a mysqlstore
// table of the test's own, named prefix and a random suffix; it returns the
// database, the parsed DSN and the table's name. The table is dropped and
// the database closed when the test ends.
func StoreTable(t testing.TB, prefix string) (*sql.DB, *mysql.Config, string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	table := prefix + hex.EncodeToString(b)
	if err := mysqlstore.New(db, mysqlstore.WithTable(table)).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP TABLE IF EXISTS `" + table + "`"); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	return db, cfg, table
}

// BreakTx is idemtest's Options.BreakTx for mysqlstore.NewTx: it kills,
// from another connection of db, the session of the transaction ctx
// carries (mysqlstore.TxFrom), and waits until the server has ended it.
func BreakTx(db *sql.DB) func(context.Context) error {
	return func(ctx context.Context) error {
		tx, ok := mysqlstore.TxFrom(ctx)
		if !ok {
			return errors.New("mysqlenv: no mysqlstore transaction in the method's context")
		}
		var id int64
		if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10)); err != nil {
			return err
		}
		// KILL marks the session; its thread ends it (and frees its
		// locks) on its own. Wait for that, so that the call's next
		// statement meets a closed session.
		for {
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("mysqlenv: session %d still there after KILL: %w", id, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// Dedicated starts a MariaDB server of the test's own with
// scripts/mariadb.sh (a fresh data directory under the system's temporary
// directory, a free loopback port) and returns its DSN; the server is
// stopped and its directory removed when the test ends. It is for tests
// that change the server's global settings (SET GLOBAL
// max_allowed_packet, …), which would disturb the other tests of the
// shared server. Like testenv.MySQLDSN it skips the test (fails it under
// CI=true) when the test server is not available: the MariaDB binaries
// come with it.
func Dedicated(t testing.TB) string {
	t.Helper()
	testenv.MySQLDSN(t)
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("mysqlenv: cannot find the source tree")
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "mariadb.sh")
	// Not t.TempDir: its parent is private, and the server runs as the
	// mysql user when the tests run as root.
	dir, err := os.MkdirTemp("", "idem-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		out, err := exec.Command(script, "stop", dir).CombinedOutput()
		if err != nil {
			t.Errorf("mysqlenv: stop the dedicated server: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	var stderr strings.Builder
	cmd := exec.Command(script, "start", dir)
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "IDEM_MYSQL_DURABLE=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mysqlenv: start a dedicated server: %v\n%s", err, stderr.String())
	}
	dsn, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "IDEM_MYSQL_DSN=")
	if !ok {
		t.Fatalf("mysqlenv: scripts/mariadb.sh printed %q, not IDEM_MYSQL_DSN=…", out)
	}
	return dsn
}
