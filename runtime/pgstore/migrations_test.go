package pgstore_test

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/pgstore"
)

var updateGoose = flag.Bool("update-goose", false, "rewrite migrations/goose from migrations/golang-migrate")

// gooseFiles derives goose's layout from golang-migrate's: for each version,
// one file named like its up file without ".up", holding the up file under
// "-- +goose Up" and the down file under "-- +goose Down", byte for byte.
func gooseFiles(t *testing.T, gm fs.FS) map[string]string {
	t.Helper()
	names, err := fs.Glob(gm, "*.sql")
	require.NoError(t, err)
	name := regexp.MustCompile(`^([0-9]+_[a-z0-9_]+)\.(up|down)\.sql$`)
	up, down := map[string]string{}, map[string]string{}
	for _, n := range names {
		m := name.FindStringSubmatch(n)
		require.NotNil(t, m, "%s: not a golang-migrate file name (N_name.up.sql or N_name.down.sql)", n)
		b, err := fs.ReadFile(gm, n)
		require.NoError(t, err)
		if m[2] == "up" {
			up[m[1]] = string(b)
		} else {
			down[m[1]] = string(b)
		}
	}
	out := map[string]string{}
	for base, u := range up {
		d, ok := down[base]
		require.True(t, ok, "%s.up.sql has no %[1]s.down.sql", base)
		require.True(t, strings.HasSuffix(u, "\n") && strings.HasSuffix(d, "\n"), "%s: files end with a newline", base)
		out[base+".sql"] = "-- +goose Up\n" + u + "-- +goose Down\n" + d
	}
	for base := range down {
		_, ok := up[base]
		require.True(t, ok, "%s.down.sql has no %[1]s.up.sql", base)
	}
	return out
}

// TestGooseMigrationsDerived checks that migrations/goose is exactly what
// gooseFiles derives from migrations/golang-migrate (no file more, none
// less, byte for byte), so that the statements live in one place. Run with
// -update-goose to rewrite it.
func TestGooseMigrationsDerived(t *testing.T) {
	want := gooseFiles(t, pgstore.MigrationFiles())
	if *updateGoose {
		old, err := filepath.Glob("migrations/goose/*.sql")
		require.NoError(t, err)
		for _, f := range old {
			require.NoError(t, os.Remove(f))
		}
		for n, b := range want {
			require.NoError(t, os.WriteFile(filepath.Join("migrations/goose", n), []byte(b), 0o644))
		}
		return
	}
	got, err := fs.Glob(pgstore.GooseMigrationFiles(), "*")
	require.NoError(t, err)
	wantNames := make([]string, 0, len(want))
	for n := range want {
		wantNames = append(wantNames, n)
	}
	slices.Sort(wantNames)
	require.Equal(t, wantNames, got, "migrations/goose is stale: run go test ./runtime/pgstore -run TestGooseMigrationsDerived -update-goose")
	for _, n := range got {
		b, err := fs.ReadFile(pgstore.GooseMigrationFiles(), n)
		require.NoError(t, err)
		assert.Equal(t, want[n], string(b), "%s is stale: run go test ./runtime/pgstore -run TestGooseMigrationsDerived -update-goose", n)
	}
}

// TestSchemaIsMigrationFiles checks that Schema, ArchiveSchema and
// ListSchema, which Migrate runs, are the up files of versions 1 to 3.
func TestSchemaIsMigrationFiles(t *testing.T) {
	b, err := fs.ReadFile(pgstore.MigrationFiles(), "0001_idem_records.up.sql")
	require.NoError(t, err)
	assert.Equal(t, string(b), pgstore.Schema)
	b, err = fs.ReadFile(pgstore.MigrationFiles(), "0002_idem_records_archive.up.sql")
	require.NoError(t, err)
	assert.Equal(t, string(b), pgstore.ArchiveSchema)
	b, err = fs.ReadFile(pgstore.MigrationFiles(), "0003_idem_records_list_idx.up.sql")
	require.NoError(t, err)
	assert.Equal(t, string(b), pgstore.ListSchema)
}
