package sqlitestore

import (
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgen/idemgen/runtime/idem"
)

// passing reports whether err is an answer of SQLite that can pass, so
// that the store marks it with idem.StoreOutage: the executor then keeps
// trying a Complete or a Release instead of taking it for a refusal (see
// idem.ErrStoreOutage). They are, by primary result code:
//
//   - SQLITE_FULL: the disk (or the database's max_page_count) is full,
//     until space is freed;
//   - SQLITE_BUSY and SQLITE_LOCKED: another connection or process held the
//     lock beyond busy_timeout;
//   - SQLITE_IOERR: a read or write of the file failed (a full or
//     failing disk, a file system remounted);
//   - SQLITE_PROTOCOL: the WAL's locking protocol raced, retried too often.
func passing(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_PROTOCOL:
		return true
	}
	return false
}

// outage marks err with idem.StoreOutage when it can pass (see passing).
func outage(err error) error {
	if passing(err) {
		return idem.StoreOutage(err)
	}
	return err
}
