package pgstore

import (
	"embed"
	"fmt"
	"io/fs"
)

// migrationFiles holds the schema as versioned migrations in two layouts:
// migrations/golang-migrate, the one source of the statements, and
// migrations/goose, derived from it (see GooseMigrationFiles).
//
//go:embed migrations/golang-migrate/*.sql migrations/goose/*.sql
var migrationFiles embed.FS

// MigrationFiles returns the schema of the default table names as versioned
// migrations in golang-migrate's layout: for each version N, the files
// N_name.up.sql and N_name.down.sql (0001: idem_records and its index; 0002:
// the archive table, idem_records_archive). They are plain SQL, without
// annotations; the up files are Schema and ArchiveSchema, the statements
// Migrate runs. Use them with golang-migrate's iofs source
// (iofs.New(pgstore.MigrationFiles(), ".")) or copy them into a migrations
// directory (they are runtime/pgstore/migrations/golang-migrate in the
// source tree). A store configured with WithTable or WithArchive under
// another name needs Migrate, or copies of the files with the names replaced.
func MigrationFiles() fs.FS { return sub("migrations/golang-migrate") }

// GooseMigrationFiles returns the same migrations in goose's layout: one file
// N_name.sql per version, holding "-- +goose Up", that version's up file,
// "-- +goose Down" and its down file, byte for byte. Use them with
// goose.NewProvider(goose.DialectPostgres, db, pgstore.GooseMigrationFiles())
// or copy them (runtime/pgstore/migrations/goose in the source tree).
func GooseMigrationFiles() fs.FS { return sub("migrations/goose") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(migrationFiles, dir)
	if err != nil {
		// Unreachable: dir is a constant directory of migrationFiles.
		panic(fmt.Sprintf("pgstore: migrations: %v", err))
	}
	return f
}
