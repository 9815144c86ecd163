package pgstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestFailMarksPassingErrors: fail marks the server's answers that can pass
// with idem.ErrStoreOutage, and no refusal.
func TestFailMarksPassingErrors(t *testing.T) {
	for code, want := range map[string]bool{
		"25006": true, "08006": true, "08001": true, "57P01": true, "57P02": true, "57P03": true,
		"53300": true, "53100": true, "53200": true, "40001": true, "40P01": true, "55P03": true,
		"23505": false, "22P02": false, "42P01": false, "57P04": false, "25P02": false, "54000": false,
	} {
		err := fail("complete", idem.Key{}, fmt.Errorf("exec: %w", &pgconn.PgError{Code: code, Message: "m"}))
		assert.Equal(t, want, errors.Is(err, idem.ErrStoreOutage), code)
	}
	assert.NotErrorIs(t, fail("complete", idem.Key{}, idem.ErrLeaseLost), idem.ErrStoreOutage)
	assert.ErrorIs(t, fail("complete", idem.Key{}, &pgconn.ConnectError{}), idem.ErrStoreOutage)
}
