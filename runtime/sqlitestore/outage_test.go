package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// fullFor is a real sqlitestore.Store whose database is full (SQLite's
// max_page_count, on every connection, reached by a filler table) from
// start until the executor's clock has advanced by span; then the filler
// is deleted, freeing its pages, as an operator freeing a full disk does.
type fullFor struct {
	*sqlitestore.Store
	db    *sql.DB
	clock *idemtest.FakeClock

	mu      sync.Mutex
	until   time.Time
	freed   bool
	answers []error
}

// fill fills the database up to its max_page_count.
func (s *fullFor) fill(ctx context.Context, span time.Duration) error {
	s.mu.Lock()
	s.until = s.clock.Now().Add(span)
	s.mu.Unlock()
	blob := make([]byte, 2000)
	for range 10000 {
		_, err := s.db.ExecContext(ctx, "INSERT INTO filler(b) VALUES (?)", blob)
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

func (s *fullFor) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	s.mu.Lock()
	if !s.until.IsZero() && !s.clock.Now().Before(s.until) && !s.freed {
		s.freed = true
		if _, err := s.db.ExecContext(ctx, "DELETE FROM filler"); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	s.mu.Unlock()
	err := s.Store.Complete(ctx, key, token, out, ttl)
	s.mu.Lock()
	s.answers = append(s.answers, err)
	s.mu.Unlock()
	return err
}

// TestCompleteThroughFullDisk is issue 37's report: SQLite answers
// "database or disk is full" (SQLITE_FULL) for 2 s, by the executor's
// clock, while a call stores its outcome under a 30 s lease. The store
// marks the answer as an outage, the executor keeps trying (no substitute,
// which would fail the same way), the outcome is stored once space is
// freed, and a retry after the lease replays it: the method ran once.
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
	store := sqlitestore.New(db)
	require.NoError(t, store.Migrate(ctx))
	_, err = db.ExecContext(ctx, "CREATE TABLE filler(b BLOB)")
	require.NoError(t, err)

	clk := idemtest.NewFakeClock(time.Unix(1_700_000_000, 0), true) // Sleep advances it at once
	full := &fullFor{Store: store, db: db, clock: clk}
	var mu sync.Mutex
	var events []idem.EventKind
	ex := idem.NewExecutor(full, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(30*time.Second),
		idem.WithObserver(func(e idem.Event) { mu.Lock(); events = append(events, e.Kind); mu.Unlock() }))
	m := &idem.Method{Op: "billing.Pay", TTL: time.Hour}
	runs := 0
	pay := func(ctx context.Context) (string, error) {
		runs++
		if runs == 1 {
			if err := full.fill(ctx, 2*time.Second); err != nil {
				return "", err
			}
		}
		return strings.Repeat("r", 20_000) + string(rune('0'+runs)), nil // needs new pages to store
	}
	do := func() (string, error) {
		var kp idem.KeyParts
		kp.String("id", "order-1")
		var h idem.Hasher
		h.String("order-1")
		return idem.Do(ctx, ex, m, &kp, &h, pay)
	}
	v, err := do()
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(v, "1"))

	full.mu.Lock()
	answers := full.answers
	full.mu.Unlock()
	require.Greater(t, len(answers), 1, "the first Complete met the full database")
	var se *sqlite.Error
	require.ErrorAs(t, answers[0], &se, "SQLite's own answer")
	assert.Equal(t, sqlite3.SQLITE_FULL, se.Code()&0xff, se.Error())
	assert.Contains(t, answers[0].Error(), "database or disk is full")
	assert.ErrorIs(t, answers[0], idem.ErrStoreOutage, "sqlitestore marks it as an outage")
	assert.NoError(t, answers[len(answers)-1], "stored once space is freed")
	mu.Lock()
	assert.Contains(t, events, idem.EventCompleted)
	assert.NotContains(t, events, idem.EventOutcomeNotStored, "an outage gets no substitute")
	mu.Unlock()

	// Well past the lease, by the store's clock too: a claim left
	// PROCESSING would be taken over now.
	require.NoError(t, clk.Sleep(ctx, time.Minute))
	store2 := sqlitestore.New(db, sqlitestore.WithClock(func() time.Time { return time.Now().Add(time.Minute) }))
	ex2 := idem.NewExecutor(store2, idem.SingleTenant())
	var kp idem.KeyParts
	kp.String("id", "order-1")
	var h idem.Hasher
	h.String("order-1")
	v, err = idem.Do(ctx, ex2, m, &kp, &h, pay)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(v, "1"), "the retry replays the stored outcome")
	assert.Equal(t, 1, runs, "the method ran exactly once")
}
