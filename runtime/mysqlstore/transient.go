package mysqlstore

import (
	"database/sql/driver"
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/runtime/idem"
)

// MySQL and MariaDB error numbers of answers that can pass (see passing).
const (
	errConCount         = 1040 // ER_CON_COUNT_ERROR: too many connections
	errDiskFull         = 1021 // ER_DISK_FULL
	errRecordFileFull   = 1114 // ER_RECORD_FILE_FULL: the table is full
	errUnknownCommand   = 1047 // ER_UNKNOWN_COM_ERROR: Galera's "WSREP has not yet prepared node for application use"
	errOptionPrevents   = 1290 // ER_OPTION_PREVENTS_STATEMENT: --read-only, --super-read-only
	errReadOnlyMode     = 1836 // ER_READ_ONLY_MODE
	errServerShutdown   = 1053 // ER_SERVER_SHUTDOWN
	errQueryInterrupted = 1317 // ER_QUERY_INTERRUPTED
	errServerGone       = 2006 // CR_SERVER_GONE_ERROR
	errServerLost       = 2013 // CR_SERVER_LOST
)

// passing reports whether err is an answer of MySQL or MariaDB (or of the
// driver about the connection) that can pass, so that the store marks it
// with idem.StoreOutage: the executor then keeps trying a Complete or a
// Release instead of taking it for a refusal (see idem.ErrStoreOutage).
// They are what a client meets during a failover, a restart or an
// overload: a server switched read-only (1290, 1836), too many connections
// (1040), a full disk or table (1021, 1114), a Galera node that is not
// ready (1047), a shutdown or an interrupted query (1053, 1317), a server
// gone away or a lost connection (2006, 2013, and the driver's own
// invalid-connection and bad-connection errors), and a lock wait timeout or
// a deadlock (1205, 1213: the server rolled the statement back; Galera
// also reports a certification failure as 1213).
func passing(err error) bool {
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	switch errNumber(err) {
	case errConCount, errDiskFull, errRecordFileFull, errUnknownCommand, errOptionPrevents, errReadOnlyMode,
		errServerShutdown, errQueryInterrupted, errServerGone, errServerLost, errLockWaitTimeout, errDeadlock:
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
