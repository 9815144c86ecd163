// Package sqlitestore is the durable embedded idempotency store of idemgen:
// records live in one SQLite file, through the pure-Go driver
// modernc.org/sqlite (no cgo), so that outcomes survive a restart without a
// database server. It is its own Go module, so that users of the core
// runtime do not inherit the driver.
package sqlitestore
