package mysqlstore_test

import (
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// TestMigrationFiles: each goose file is golang-migrate's up and down files
// of its version under goose's annotations, byte for byte; each up file is
// one statement (no tool needs multiStatements); the up files are Schema and
// ListIndexSchema, which Migrate runs for the default table unchanged and,
// under WithTable, with the names replaced.
func TestMigrationFiles(t *testing.T) {
	versions := []string{"0001_idem_records", "0002_idem_records_list_idx"}
	ups := []string{mysqlstore.Schema, mysqlstore.ListIndexSchema}
	names, err := fs.Glob(mysqlstore.GooseMigrationFiles(), "*.sql")
	require.NoError(t, err)
	assert.Len(t, names, len(versions), "every version in both layouts")
	for i, v := range versions {
		up, err := fs.ReadFile(mysqlstore.MigrationFiles(), v+".up.sql")
		require.NoError(t, err)
		down, err := fs.ReadFile(mysqlstore.MigrationFiles(), v+".down.sql")
		require.NoError(t, err)
		goose, err := fs.ReadFile(mysqlstore.GooseMigrationFiles(), v+".sql")
		require.NoError(t, err)
		assert.Equal(t, "-- +goose Up\n"+string(up)+"-- +goose Down\n"+string(down), string(goose), v)
		assert.Equal(t, ups[i], string(up), v)
		for _, f := range []string{string(up), string(down)} {
			var code strings.Builder
			for line := range strings.Lines(f) {
				if !strings.HasPrefix(line, "--") {
					code.WriteString(line)
				}
			}
			assert.Equal(t, 1, strings.Count(code.String(), ";"), "%s: one statement", v)
		}
	}
	assert.Equal(t, mysqlstore.Schema, mysqlstore.New(nil).MigrationSQL())
	assert.Equal(t, mysqlstore.ListIndexSchema, mysqlstore.New(nil).ListIndexSQL())
	other := mysqlstore.New(nil, mysqlstore.WithTable("app.records"))
	assert.Contains(t, other.MigrationSQL(), "CREATE TABLE IF NOT EXISTS `app`.`records` (")
	assert.Contains(t, other.MigrationSQL(), "KEY `records_expires_at_idx` (expires_at)")
	assert.NotContains(t, other.MigrationSQL(), "idem_records")
	assert.Contains(t, other.ListIndexSQL(), "CREATE INDEX `records_op_created_idx` ON `app`.`records` (op, created_at, idem_key);")
	assert.NotContains(t, other.ListIndexSQL(), "idem_records")
}

// TestTableNames: New refuses a table name that is not plain identifiers,
// or whose index name would pass MySQL's 64 bytes.
func TestTableNames(t *testing.T) {
	for _, bad := range []string{"", "a.b.c", "1abc", "a-b", "x`y", strings.Repeat("a", 50)} {
		assert.Panics(t, func() { mysqlstore.New(nil, mysqlstore.WithTable(bad)) }, "%q", bad)
	}
	assert.NotPanics(t, func() { mysqlstore.New(nil, mysqlstore.WithTable("db_1.records_2")) })
}

// TestHandMadeTable: a table made by hand without a column the store needs
// is not fixed by Migrate (it creates tables, never alters one), and the
// store's error says so instead of advising Migrate.
func TestHandMadeTable(t *testing.T) {
	db := newDB(t, 4)
	table := "idem_test_hand_" + randHex(4)
	_, err := db.Exec("CREATE TABLE " + table + " (idem_key BINARY(32) PRIMARY KEY, token BIGINT NOT NULL) ENGINE = InnoDB")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	s := mysqlstore.New(db, mysqlstore.WithTable(table))
	require.Error(t, s.Migrate(t.Context()), "the listing index names columns the table lacks")
	k, err := idem.NewKey("", "hand.Op", "k")
	require.NoError(t, err)
	_, err = s.Claim(t.Context(), idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Hour})
	require.ErrorIs(t, err, idem.ErrStoreSchema)
	require.Contains(t, err.Error(), "does not alter an existing table")
}
