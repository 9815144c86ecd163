package mysqlstore_test

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// TestMigrationFiles: goose's file is golang-migrate's up and down files
// under goose's annotations, byte for byte; the up file is Schema, one
// statement (no tool needs multiStatements); Migrate runs it for the
// default table unchanged and, under WithTable, with the names replaced.
func TestMigrationFiles(t *testing.T) {
	up, err := fs.ReadFile(mysqlstore.MigrationFiles(), "0001_idem_records.up.sql")
	require.NoError(t, err)
	down, err := fs.ReadFile(mysqlstore.MigrationFiles(), "0001_idem_records.down.sql")
	require.NoError(t, err)
	goose, err := fs.ReadFile(mysqlstore.GooseMigrationFiles(), "0001_idem_records.sql")
	require.NoError(t, err)
	assert.Equal(t, "-- +goose Up\n"+string(up)+"-- +goose Down\n"+string(down), string(goose))
	assert.Equal(t, mysqlstore.Schema, string(up))
	var code strings.Builder
	for line := range strings.Lines(string(up)) {
		if !strings.HasPrefix(line, "--") {
			code.WriteString(line)
		}
	}
	assert.Equal(t, 1, strings.Count(code.String(), ";"), "one statement")
	assert.Equal(t, mysqlstore.Schema, mysqlstore.New(nil).MigrationSQL())
	other := mysqlstore.New(nil, mysqlstore.WithTable("app.records")).MigrationSQL()
	assert.Contains(t, other, "CREATE TABLE IF NOT EXISTS `app`.`records` (")
	assert.Contains(t, other, "KEY `records_expires_at_idx` (expires_at)")
	assert.NotContains(t, other, "idem_records")
}

// TestTableNames: New refuses a table name that is not plain identifiers,
// or whose index name would pass MySQL's 64 bytes.
func TestTableNames(t *testing.T) {
	for _, bad := range []string{"", "a.b.c", "1abc", "a-b", "x`y", strings.Repeat("a", 50)} {
		assert.Panics(t, func() { mysqlstore.New(nil, mysqlstore.WithTable(bad)) }, "%q", bad)
	}
	assert.NotPanics(t, func() { mysqlstore.New(nil, mysqlstore.WithTable("db_1.records_2")) })
}
