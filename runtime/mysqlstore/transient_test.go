package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// TestCompleteThroughReadOnlyServer: a mysqlstore.Store, connected as a
// user without READ_ONLY ADMIN, on a MariaDB server an operator switches
// read-only (SET GLOBAL read_only = ON: a demoted primary; the test's root
// is not affected) for 3 s, by the executor's clock, while a lease-mode
// call stores its outcome under a 5 s lease. MariaDB answers 1290 (running
// with the --read-only option); the rest is
// idemtest.CompleteThroughOutage's: the method runs exactly once.
func TestCompleteThroughReadOnlyServer(t *testing.T) {
	ctx := t.Context()
	admin := newDB(t, 2)
	table := newTable(t, admin)
	user := "idem_ro_" + randHex(4)
	cfg := testConfig(t)
	_, err := admin.ExecContext(ctx, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "SET GLOBAL read_only = OFF")
		_, _ = admin.ExecContext(context.Background(), "DROP USER '"+user+"'@'%'")
	})
	_, err = admin.ExecContext(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+cfg.DBName+"`.`"+table+"` TO '"+user+"'@'%'")
	require.NoError(t, err)
	cfg.User, cfg.Passwd = user, "pw"
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })

	readOnly := func(q string) func(context.Context) error {
		return func(ctx context.Context) error { _, err := admin.ExecContext(ctx, q); return err }
	}
	idemtest.CompleteThroughOutage(t, idemtest.StoreOutage{
		Store: mysqlstore.New(db, mysqlstore.WithTable(table)),
		Begin: readOnly("SET GLOBAL read_only = ON"),
		End:   readOnly("SET GLOBAL read_only = OFF"),
		Span:  3 * time.Second,
		Lease: 5 * time.Second,
		CheckFirst: func(t testing.TB, err error) {
			var me *mysql.MySQLError
			require.True(t, errors.As(err, &me), "the server's own answer: %v", err)
			assert.Equal(t, uint16(1290), me.Number, me.Message)
		},
	})
}
