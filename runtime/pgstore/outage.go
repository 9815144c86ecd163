package pgstore

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// passing reports whether err is an answer of PostgreSQL (or of pgx about
// the connection) that can pass, so that the store marks it with
// idem.StoreOutage: the executor then keeps trying a Complete or a Release
// instead of taking it for a refusal (see idem.ErrStoreOutage). They are
// what a client meets during a failover, a restart or an overload:
//
//   - 25006 read_only_sql_transaction: a demoted primary, a standby, or
//     default_transaction_read_only switched on;
//   - class 08, connection exceptions, and pgx's own connection errors
//     (a failed connect, a connection lost before the statement was sent);
//   - 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now
//     (57P04 database_dropped does not pass, and is not one of them);
//   - 53300 too_many_connections, 53100 disk_full, 53200 out_of_memory;
//   - 40001 serialization_failure and 40P01 deadlock_detected (the server
//     rolled the statement back; the same statement again may pass);
//   - 55P03 lock_not_available (the store's lock_timeout ran out).
func passing(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch c := pe.Code; {
		case c == "25006", strings.HasPrefix(c, "08"),
			c == "57P01", c == "57P02", c == "57P03",
			c == "53300", c == "53100", c == "53200",
			c == "40001", c == "40P01", c == "55P03":
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}
