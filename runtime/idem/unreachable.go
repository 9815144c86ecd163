package idem

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// unreachable reports whether err says that the store could not be reached,
// lost the connection or was briefly unavailable (a later try may succeed),
// as opposed to a store that answered and refused the request. After its
// retries, the executor stores the substitute NotStoredCode outcome only for
// a refusal: an unreachable store would take the real outcome a moment
// later, and storing the substitute then would replace a result that could
// have been stored.
//
// It knows errors by their kind, not their driver (no driver is imported
// here): context and network errors, a closed connection, an SQLSTATE
// (pgx's SQLState method) of the classes that mean a connection, resource,
// operator or transaction-rollback condition, and the Redis replies of a
// server that is loading, read-only or failing over.
func unreachable(err error) bool {
	var timeout interface{ Timeout() bool } // net.Error, and drivers' own timeouts
	var sql interface{ SQLState() string }
	var redis interface {
		error
		RedisError()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH):
		return true
	case errors.As(err, &timeout):
		return true
	case errors.As(err, &sql):
		// 08 connection exception, 40 transaction rollback (serialization,
		// deadlock), 53 insufficient resources, 57 operator intervention
		// (a terminated backend, a shutdown), 58 system error.
		switch c := sql.SQLState(); {
		case strings.HasPrefix(c, "08"), strings.HasPrefix(c, "40"), strings.HasPrefix(c, "53"),
			strings.HasPrefix(c, "57"), strings.HasPrefix(c, "58"):
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
