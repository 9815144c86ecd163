// Package migrationtest applies pgstore's migration files with goose and
// golang-migrate against a real PostgreSQL server and runs the store
// conformance suite on the result. It is a module of its own so that the two
// tools stay out of the dependencies of the idemgen module.
package migrationtest
