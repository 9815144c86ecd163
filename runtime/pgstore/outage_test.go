package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// readOnlyFor is a real pgstore.Store on a database of its own that an
// operator switches read-only (ALTER DATABASE ... SET
// default_transaction_read_only = on, the pool reconnecting as a client of
// a demoted primary or a standby does) from start until the executor's
// clock has advanced by span, and back.
type readOnlyFor struct {
	*pgstore.Store
	admin, pool *pgxpool.Pool
	db          string
	clock       *idemtest.FakeClock

	mu       sync.Mutex
	until    time.Time // zero: read-write
	answers  []error   // every Complete's answer
	restored bool
}

func (s *readOnlyFor) set(ctx context.Context, on bool) error {
	q := "ALTER DATABASE " + pgx.Identifier{s.db}.Sanitize() + " RESET default_transaction_read_only"
	if on {
		q = "ALTER DATABASE " + pgx.Identifier{s.db}.Sanitize() + " SET default_transaction_read_only = on"
	}
	if _, err := s.admin.Exec(ctx, q); err != nil {
		return err
	}
	s.pool.Reset() // the store's sessions start again, with the database's setting
	return nil
}

// start switches the database read-only for span of the executor's clock.
func (s *readOnlyFor) start(ctx context.Context, span time.Duration) error {
	s.mu.Lock()
	s.until = s.clock.Now().Add(span)
	s.mu.Unlock()
	return s.set(ctx, true)
}

func (s *readOnlyFor) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	s.mu.Lock()
	if !s.until.IsZero() && !s.clock.Now().Before(s.until) && !s.restored {
		s.restored = true
		if err := s.set(ctx, false); err != nil {
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

// TestCompleteThroughReadOnlyDatabase is issue 37's report on a real
// server: PostgreSQL answers 25006 (cannot execute UPDATE in a read-only
// transaction) for 3 s, by the executor's clock, while a lease-mode call
// stores its outcome under a 5 s lease. The store marks the answer as an
// outage, the executor keeps trying, the outcome is stored once the
// database is writable again, and a retry after the lease replays it: the
// method ran exactly once.
func TestCompleteThroughReadOnlyDatabase(t *testing.T) {
	ctx := t.Context()
	admin := newPool(t, 2, nil)
	db := "idem_ro_" + randHex(6)
	_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
		assert.NoError(t, err)
	})
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.Database = db
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := pgstore.New(pool)
	require.NoError(t, store.Migrate(ctx))

	clk := idemtest.NewFakeClock(time.Unix(1_700_000_000, 0), true) // Sleep advances it at once
	ro := &readOnlyFor{Store: store, admin: admin, pool: pool, db: db, clock: clk}
	var mu sync.Mutex
	var events []idem.EventKind
	ex := idem.NewExecutor(ro, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(5*time.Second),
		idem.WithObserver(func(e idem.Event) { mu.Lock(); events = append(events, e.Kind); mu.Unlock() }))
	m := &idem.Method{Op: "billing.Pay", TTL: time.Hour}
	runs := 0
	pay := func(ctx context.Context) (int, error) {
		runs++
		if runs == 1 {
			if err := ro.start(ctx, 3*time.Second); err != nil {
				return 0, err
			}
		}
		return 100 + runs, nil
	}
	do := func() (int, error) {
		var kp idem.KeyParts
		kp.String("id", "order-1")
		var h idem.Hasher
		h.String("order-1")
		return idem.Do(ctx, ex, m, &kp, &h, pay)
	}
	v, err := do()
	require.NoError(t, err)
	assert.Equal(t, 101, v)

	ro.mu.Lock()
	answers := ro.answers
	ro.mu.Unlock()
	require.Greater(t, len(answers), 1, "the first Complete met the read-only database")
	var pe *pgconn.PgError
	require.ErrorAs(t, answers[0], &pe, "the server's own answer")
	assert.Equal(t, "25006", pe.Code, pe.Message)
	assert.ErrorIs(t, answers[0], idem.ErrStoreOutage, "pgstore marks it as an outage")
	assert.NoError(t, answers[len(answers)-1], "stored once the database is writable")
	mu.Lock()
	assert.Contains(t, events, idem.EventCompleted)
	assert.NotContains(t, events, idem.EventOutcomeNotStored, "an outage gets no substitute")
	mu.Unlock()

	clk.Sleep(ctx, time.Minute) // well past the lease: a claim left PROCESSING would be taken over
	v, err = do()
	require.NoError(t, err)
	assert.Equal(t, 101, v, "the retry replays the stored outcome")
	assert.Equal(t, 1, runs, "the method ran exactly once")
	assert.False(t, errors.Is(err, idem.ErrOutcomeNotStored))
}
