package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// TestCompleteThroughFullDisk is issue 37's report: a sqlitestore.Store
// whose database is full (SQLite's max_page_count, on every connection,
// reached by a filler table) for 2 s, by the executor's clock, while a call
// stores its outcome under a 30 s lease; then the filler is deleted,
// freeing its pages, as an operator freeing a full disk does. SQLite
// answers "database or disk is full" (SQLITE_FULL); the rest is
// idemtest.CompleteThroughOutage's (no substitute either: it would fail the
// same way): the method runs exactly once. The store reads the executor's
// clock, so the retry comes after the lease by the store's clock too.
func TestCompleteThroughFullDisk(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "idem.db")
	q := url.Values{}
	for _, p := range []string{"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(1)", "max_page_count(200)"} {
		q.Add("_pragma", p)
	}
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	clk := idemtest.NewFakeClock(time.Unix(1_700_000_000, 0), true)
	store := sqlitestore.New(db, sqlitestore.WithClock(clk.Now))
	require.NoError(t, store.Migrate(ctx))
	_, err = db.ExecContext(ctx, "CREATE TABLE filler(b BLOB)")
	require.NoError(t, err)

	// fill fills the database up to its max_page_count.
	fill := func(ctx context.Context) error {
		blob := make([]byte, 2000)
		for range 10000 {
			_, err := db.ExecContext(ctx, "INSERT INTO filler(b) VALUES (?)", blob)
			var se *sqlite.Error
			if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL {
				return nil
			}
			if err != nil {
				return err
			}
		}
		return errors.New("the database never filled up")
	}
	idemtest.CompleteThroughOutage(t, idemtest.StoreOutage{
		Store: store,
		Clock: clk,
		Begin: fill,
		End: func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, "DELETE FROM filler")
			return err
		},
		Span:  2 * time.Second,
		Lease: 30 * time.Second,
		Result: func(run int) string {
			return strings.Repeat("r", 20_000) + string(rune('0'+run)) // needs new pages to store
		},
		CheckFirst: func(t testing.TB, err error) {
			var se *sqlite.Error
			require.ErrorAs(t, err, &se, "SQLite's own answer")
			assert.Equal(t, sqlite3.SQLITE_FULL, se.Code()&0xff, se.Error())
			assert.Contains(t, err.Error(), "database or disk is full")
		},
	})
}
