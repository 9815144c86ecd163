package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// fakeClock is the process clock moved forward by Sleep: leases lapse and
// records expire without waiting.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) Now() time.Time             { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) Sleep(d time.Duration)      { c.offset.Add(int64(d)) }
func (c *fakeClock) option() sqlitestore.Option { return sqlitestore.WithClock(c.Now) }

// openDB opens a fresh migrated database file in the test's directory.
func openDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := sqlitestore.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, sqlitestore.New(db).Migrate(context.Background()))
	return db, path
}

func fp(s string) idem.Fingerprint {
	var f idem.Fingerprint
	copy(f[:], s)
	return f
}

var tokens atomic.Uint64

func newToken() idem.Token { return idem.Token(tokens.Add(1)<<16 | 0xbeef) }

func succeeded(body string) idem.Outcome {
	return idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(body)}
}
