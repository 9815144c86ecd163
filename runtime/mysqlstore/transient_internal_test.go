package mysqlstore

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestFailMarksPassingErrors: fail marks the server's answers that can
// pass with idem.ErrStoreOutage, and no refusal.
func TestFailMarksPassingErrors(t *testing.T) {
	for n, want := range map[uint16]bool{
		1040: true, 1021: true, 1114: true, 1047: true, 1290: true, 1836: true, 1053: true, 1317: true,
		1205: true, 1213: true, 2006: true, 2013: true,
		1062: false, 1146: false, 1054: false, 1366: false, 1406: false, 1064: false,
	} {
		err := fail("complete", idem.Key{}, fmt.Errorf("exec: %w", &mysql.MySQLError{Number: n, Message: "m"}))
		assert.Equal(t, want, errors.Is(err, idem.ErrStoreOutage), "%d", n)
	}
	assert.ErrorIs(t, fail("complete", idem.Key{}, mysql.ErrInvalidConn), idem.ErrStoreOutage)
	assert.ErrorIs(t, fail("complete", idem.Key{}, driver.ErrBadConn), idem.ErrStoreOutage)
	assert.NotErrorIs(t, fail("complete", idem.Key{}, idem.ErrLeaseLost), idem.ErrStoreOutage)
}
