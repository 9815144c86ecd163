// Command idemctl looks up, lists, counts and forgets the idempotency
// records of a PostgreSQL or Redis store, for operators:
//
//	idemctl --dsn postgres://… get --tenant acme --op billing.Charge order-7
//	idemctl --dsn postgres://… stuck --op billing.Charge
//	idemctl --dsn redis://… forget <key hex> --token N --status SUCCEEDED --reason '…'
//	idemctl --dsn postgres://… stats
//
// Run idemctl with no arguments for every command and flag. SQLite stores
// are served by the build in runtime/sqlitestore/cmd/idemctl (the SQLite
// driver lives in that nested module); see docs/OPERATIONS.md.
package main

import (
	"github.com/idemgen/idemgen/internal/idemctl"
)

func main() {
	idemctl.Main(idemctl.Openers{"postgres": idemctl.OpenPostgres, "redis": idemctl.OpenRedis})
}
