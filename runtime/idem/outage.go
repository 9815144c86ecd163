package idem

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// ErrStoreOutage matches (errors.Is) a store error that can pass: the store
// could not be reached, lost the connection, or answered with an error that
// a later try of the same call may not get, because it says the store is
// in a state that ends by itself or by an operator, not that the request
// was wrong. Examples: a database switched read-only (a demoted primary or
// a standby during a failover), a full disk, too many connections, a
// server shutting down or starting up, a conflict or deadlock the server
// rolled back, a Redis replica or a cluster that is failing over.
//
// A store marks such errors with StoreOutage; the executor also knows the
// common ones by their kind, without the store's help. The executor treats
// an outage as a store that is away for a while, not as a refusal: see the
// package documentation, section Store outages.
var ErrStoreOutage = errors.New("idem: store outage, a later try may pass")

// StoreOutage marks err as an outage: the result matches ErrStoreOutage and
// everything err matches, and its message is err's. Stores call it on the
// errors of their server or file that can pass (see ErrStoreOutage); a
// store's refusal of the request itself (ErrTooLarge, ErrStoreSchema, a
// constraint) must not be marked. StoreOutage(nil) is nil.
func StoreOutage(err error) error {
	if err == nil || errors.Is(err, ErrStoreOutage) {
		return err
	}
	return outageError{err}
}

// outageError is an error marked by StoreOutage.
type outageError struct{ err error }

func (e outageError) Error() string { return e.err.Error() }

// Unwrap returns the store's error and ErrStoreOutage.
func (e outageError) Unwrap() []error { return []error{e.err, ErrStoreOutage} }

// outage reports whether err can pass (see ErrStoreOutage): the store could
// not be reached, lost the connection or was briefly unavailable, so a
// later try may succeed, as opposed to a store that answered and refused
// the request. After its retries, the executor stores the substitute
// NotStoredCode outcome only for a refusal: a store in an outage would take
// the real outcome a moment later, and storing the substitute then would
// replace a result that could have been stored.
//
// Besides errors marked with StoreOutage, it knows errors by their kind,
// not their driver (no driver is imported here), so that a store which
// marks nothing is covered for the common cases: context and network
// errors, a closed connection, an SQLSTATE (pgx's SQLState method) of the
// classes that mean a connection, resource, operator or transaction-rollback
// condition or a read-only transaction, and the Redis replies of a server
// that is loading, read-only or failing over.
func outage(err error) bool {
	var timeout interface{ Timeout() bool } // net.Error, and drivers' own timeouts
	var sql interface{ SQLState() string }
	var redis interface {
		error
		RedisError()
	}
	switch {
	case errors.Is(err, ErrStoreOutage):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ENOSPC):
		return true
	case errors.As(err, &timeout):
		return true
	case errors.As(err, &sql):
		// 08 connection exception, 40 transaction rollback (serialization,
		// deadlock), 53 insufficient resources (disk full, out of memory,
		// too many connections), 57 operator intervention (a terminated
		// backend, a shutdown, a server starting up), 58 system error, and
		// 25006 read_only_sql_transaction (a demoted primary, a standby).
		switch c := sql.SQLState(); {
		case strings.HasPrefix(c, "08"), strings.HasPrefix(c, "40"), strings.HasPrefix(c, "53"),
			strings.HasPrefix(c, "57"), strings.HasPrefix(c, "58"), c == "25006":
			return true
		}
	case errors.As(err, &redis):
		msg := redis.Error()
		for _, p := range []string{"LOADING ", "READONLY ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ", "BUSY ", "MOVED ", "ASK "} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return false
}
