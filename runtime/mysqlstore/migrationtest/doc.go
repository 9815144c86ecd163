// Package migrationtest applies mysqlstore's migration files with goose and
// golang-migrate on a real MariaDB (or MySQL) server, and runs the store on
// what they created. It is a module of its own, so that the two tools and
// their dependencies stay out of the root module.
package migrationtest
