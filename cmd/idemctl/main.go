// Command idemctl looks up, lists, counts and forgets the idempotency
// records of a PostgreSQL, MySQL/MariaDB or Redis store, for operators:
//
//	idemctl --dsn postgres://… get --tenant acme --op billing.Charge order-7
//	idemctl --dsn postgres://… stuck --op billing.Charge
//	idemctl --dsn redis://… forget <key hex> --token N --status SUCCEEDED --reason '…'
//	idemctl --dsn postgres://… stats
//	idemctl --dsn mysql://user:pass@host:3306/app list --op billing.Charge --status FAILED_FINAL
//	idemctl --dsn postgres://… get --tenant acme --op 'POST /charges' <Idempotency-Key>
//	idemctl get <key hex> --json --tenant acme
//
// Flags may come before or after the command. --tenant confines every
// command to that tenant's records (another tenant's record is "no live
// record", as one that does not exist). An operation named as
// runtime/idemhttp names a request ("POST /charges": the method and the
// route) takes the request's Idempotency-Key and finds the record the
// middleware stored for it.
//
// A MySQL or MariaDB DSN is a URL, mysql://user:password@host:port/dbname
// (port 3306 by default), or mysql:// followed by go-sql-driver/mysql's own
// DSN, mysql://user:password@tcp(host:port)/dbname (the form
// examples/orders takes); either may carry go-sql-driver/mysql's
// parameters (?tls=true&timeout=10s).
//
// Run idemctl with no arguments for every command and flag. SQLite stores
// are served by the build in runtime/sqlitestore/cmd/idemctl (the SQLite
// driver lives in that nested module); see docs/OPERATIONS.md.
package main

import (
	"github.com/idemgen/idemgen/internal/idemctl"
	"github.com/idemgen/idemgen/internal/storeopen"
)

func main() {
	idemctl.Main(storeopen.Openers{"postgres": storeopen.OpenPostgres, "redis": storeopen.OpenRedis, "mysql": storeopen.OpenMySQL})
}
