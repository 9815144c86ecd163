package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// readOnlyFor is a real mysqlstore.Store, connected as a user without
// READ_ONLY ADMIN, on a server an operator switches read-only (SET GLOBAL
// read_only = ON: a demoted primary) from start until the executor's clock
// has advanced by span, and back. The test's other users (root) are not
// affected.
type readOnlyFor struct {
	idem.Store
	admin *sql.DB
	clock *idemtest.FakeClock

	mu       sync.Mutex
	until    time.Time
	restored bool
	answers  []error
}

func (s *readOnlyFor) start(ctx context.Context, span time.Duration) error {
	s.mu.Lock()
	s.until = s.clock.Now().Add(span)
	s.mu.Unlock()
	_, err := s.admin.ExecContext(ctx, "SET GLOBAL read_only = ON")
	return err
}

func (s *readOnlyFor) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	s.mu.Lock()
	if !s.until.IsZero() && !s.clock.Now().Before(s.until) && !s.restored {
		s.restored = true
		if _, err := s.admin.ExecContext(ctx, "SET GLOBAL read_only = OFF"); err != nil {
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

// TestCompleteThroughReadOnlyServer: MariaDB answers 1290 (running with
// the --read-only option) for 3 s, by the executor's clock, while a
// lease-mode call stores its outcome under a 5 s lease. The store marks the
// answer as an outage, the executor keeps trying, the outcome is stored
// once the server is writable, and a retry replays it: the method ran once.
func TestCompleteThroughReadOnlyServer(t *testing.T) {
	ctx := t.Context()
	admin := newDB(t, 2)
	table := newTable(t, admin)
	user := "idem_ro_" + randHex(4)
	cfg := testConfig(t)
	_, err := admin.ExecContext(ctx, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "SET GLOBAL read_only = OFF")
		_, _ = admin.ExecContext(context.Background(), "DROP USER '"+user+"'@'%'")
	})
	_, err = admin.ExecContext(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON `"+cfg.DBName+"`.`"+table+"` TO '"+user+"'@'%'")
	require.NoError(t, err)
	cfg.User, cfg.Passwd = user, "pw"
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })

	clk := idemtest.NewFakeClock(time.Unix(1_700_000_000, 0), true) // Sleep advances it at once
	ro := &readOnlyFor{Store: mysqlstore.New(db, mysqlstore.WithTable(table)), admin: admin, clock: clk}
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
	require.Greater(t, len(answers), 1, "the first Complete met the read-only server")
	var me *mysql.MySQLError
	require.True(t, errors.As(answers[0], &me), "the server's own answer: %v", answers[0])
	assert.Equal(t, uint16(1290), me.Number, me.Message)
	assert.ErrorIs(t, answers[0], idem.ErrStoreOutage, "mysqlstore marks it as an outage")
	assert.NoError(t, answers[len(answers)-1], "stored once the server is writable")
	mu.Lock()
	assert.Contains(t, events, idem.EventCompleted)
	assert.NotContains(t, events, idem.EventOutcomeNotStored, "an outage gets no substitute")
	mu.Unlock()

	v, err = do()
	require.NoError(t, err)
	assert.Equal(t, 101, v, "the retry replays the stored outcome")
	assert.Equal(t, 1, runs, "the method ran exactly once")
}
