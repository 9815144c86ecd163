// Command idemctl is cmd/idemctl with SQLite: the same commands on
// postgres://, redis://, mysql:// and sqlite:PATH DSNs. It lives in this nested
// module because the SQLite driver does (docs/decisions/operator-records.md):
//
//	go run github.com/idemgen/idemgen/runtime/sqlitestore/cmd/idemctl --dsn sqlite:/var/lib/app/idem.db stuck
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/idemgen/idemgen/internal/idemctl"
	"github.com/idemgen/idemgen/internal/storeopen"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

func main() {
	idemctl.Main(storeopen.Openers{"postgres": storeopen.OpenPostgres, "redis": storeopen.OpenRedis, "mysql": storeopen.OpenMySQL, "sqlite": openSQLite})
}

// openSQLite opens the store of sqlite:PATH: an existing database file,
// which it neither creates nor migrates.
func openSQLite(ctx context.Context, dsn string, _ storeopen.Options) (idem.AdminStore, func(), error) {
	path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
	if path == "" {
		return nil, nil, fmt.Errorf("not a SQLite DSN (sqlite:PATH): %q", dsn)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, nil, fmt.Errorf("database file: %w", err)
	}
	db, err := sqlitestore.Open(path)
	if err != nil {
		return nil, nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return sqlitestore.New(db), func() { _ = db.Close() }, nil
}
