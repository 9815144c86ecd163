package idem_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
)

// driverError is a driver's error the executor cannot know by its kind (as
// go-sql-driver/mysql's *MySQLError or modernc.org/sqlite's *Error): only
// the store that knows the driver can say that it can pass.
type driverError struct {
	code int
	msg  string
}

func (e *driverError) Error() string { return fmt.Sprintf("Error %d: %s", e.code, e.msg) }

// passingErrors are the errors, one or more of each class, that a store
// answers for a while during an outage, as each store returns them: the
// SQLSTATEs and Redis replies unmarked (the executor knows them by their
// kind, as from a store written elsewhere), the errors of drivers it cannot
// know marked with idem.StoreOutage by the store.
var passingErrors = []struct {
	class string
	err   error
}{
	{"pg/read-only", fmt.Errorf("pgstore: complete 01: %w", &sqlError{"25006", "ERROR: cannot execute UPDATE in a read-only transaction"})},
	{"pg/admin-shutdown", &sqlError{"57P01", "FATAL: terminating connection due to administrator command"}},
	{"pg/crash-shutdown", &sqlError{"57P02", "FATAL: terminating connection due to crash of another server process"}},
	{"pg/cannot-connect-now", &sqlError{"57P03", "FATAL: the database system is in recovery mode"}},
	{"pg/too-many-connections", &sqlError{"53300", "FATAL: sorry, too many clients already"}},
	{"pg/disk-full", &sqlError{"53100", "ERROR: could not extend file: No space left on device"}},
	{"pg/serialization", &sqlError{"40001", "ERROR: could not serialize access due to concurrent update"}},
	{"pg/deadlock", &sqlError{"40P01", "ERROR: deadlock detected"}},
	{"pg/connection-failure", &sqlError{"08006", "connection failure"}},
	{"mysql/read-only", idem.StoreOutage(&driverError{1290, "The MariaDB server is running with the --read-only option so it cannot execute this statement"})},
	{"mysql/read-only-1836", idem.StoreOutage(&driverError{1836, "Running in read-only mode"})},
	{"mysql/too-many-connections", idem.StoreOutage(&driverError{1040, "Too many connections"})},
	{"mysql/lock-wait-timeout", idem.StoreOutage(&driverError{1205, "Lock wait timeout exceeded; try restarting transaction"})},
	{"mysql/deadlock", idem.StoreOutage(&driverError{1213, "Deadlock found when trying to get lock; try restarting transaction"})},
	{"mysql/gone-away", idem.StoreOutage(&driverError{2006, "MySQL server has gone away"})},
	{"mysql/disk-full", idem.StoreOutage(&driverError{1021, "Disk full (/var/lib/mysql); waiting for someone to free some space"})},
	{"mysql/table-full", idem.StoreOutage(&driverError{1114, "The table 'idem_records' is full"})},
	{"mysql/wsrep-not-ready", idem.StoreOutage(&driverError{1047, "WSREP has not yet prepared node for application use"})},
	{"redis/readonly", redisError("READONLY You can't write against a read only replica.")},
	{"redis/loading", redisError("LOADING Redis is loading the dataset in memory")},
	{"redis/masterdown", redisError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.")},
	{"redis/tryagain", redisError("TRYAGAIN Multiple keys request during rehashing of slot")},
	{"redis/clusterdown", redisError("CLUSTERDOWN The cluster is down")},
	{"redis/connection-refused", fmt.Errorf("dial tcp 127.0.0.1:6379: %w", syscall.ECONNREFUSED)},
	{"sqlite/full", idem.StoreOutage(&driverError{13, "database or disk is full (13)"})},
	{"sqlite/busy", idem.StoreOutage(&driverError{5, "database is locked (5) (SQLITE_BUSY)"})},
	{"sqlite/ioerr", idem.StoreOutage(&driverError{10, "disk I/O error (10)"})},
	{"file/no-space", fmt.Errorf("write idem.db-wal: %w", syscall.ENOSPC)},
}

// TestStoreOutageMarks: StoreOutage keeps the store's error (message and
// matches) and adds ErrStoreOutage, once; nil stays nil.
func TestStoreOutageMarks(t *testing.T) {
	base := &driverError{1290, "read-only"}
	wrapped := fmt.Errorf("mysqlstore: complete 01: %w", base)
	err := idem.StoreOutage(wrapped)
	assert.ErrorIs(t, err, idem.ErrStoreOutage)
	assert.ErrorIs(t, err, base)
	var de *driverError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, 1290, de.code)
	assert.Equal(t, wrapped.Error(), err.Error(), "the store's message, unchanged")
	assert.Equal(t, err, idem.StoreOutage(err), "marked once")
	outer := fmt.Errorf("tiered: %w", err)
	assert.ErrorIs(t, outer, idem.ErrStoreOutage, "the mark survives wrapping")
	assert.NoError(t, idem.StoreOutage(nil))
	assert.NotErrorIs(t, base, idem.ErrStoreOutage)
}

// TestDoKeepsOutcomeThroughPassingErrors: a store that answers with an
// error that can pass (every class of passingErrors) for most of the lease
// right after the method ran, on every store operation: the executor keeps
// trying, stores no substitute, the method runs exactly once and retries
// replay its outcome. This is issue 37's read-only PostgreSQL (3 s of
// 25006 under a 5 s lease) and full SQLite disk (2 s under 30 s), for
// every store's passing errors. An outage longer than the lease is lease
// mode's documented limit (TestDoKeepsOutcomeThroughOutage), unchanged.
func TestDoKeepsOutcomeThroughPassingErrors(t *testing.T) {
	for _, pe := range passingErrors {
		for _, tc := range []struct{ lease, outage time.Duration }{{5 * time.Second, 3 * time.Second}, {30 * time.Second, 2 * time.Second}, {5 * time.Second, 4900 * time.Millisecond}} {
			t.Run(fmt.Sprintf("%s/outage=%v/lease=%v", pe.class, tc.outage, tc.lease), func(t *testing.T) {
				clk := newFakeClock(true)
				st := newOutageStore(clk, pe.err, "complete", "renew", "claim", "release")
				var ev eventLog
				ex := idem.NewExecutor(noRenew{st}, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(tc.lease), idem.WithObserver(ev.observe))
				m := &idem.Method{Op: "T.Pay", TTL: time.Hour}
				runs := 0
				pay := func(context.Context) (int, error) {
					runs++
					if runs == 1 {
						st.down(tc.outage) // the store answers with the error as the method returns
					}
					return 100 + runs, nil
				}
				start := clk.Now()
				v, err := call(t.Context(), ex, m, "order-1", pay)
				require.NoError(t, err)
				assert.Equal(t, 101, v)
				assert.GreaterOrEqual(t, clk.Now().Sub(start), tc.outage, "the caller is answered once the outcome is stored")
				assert.Greater(t, st.count("complete"), 3, "Complete was tried through the outage")
				assert.Contains(t, ev.kinds(), idem.EventCompleted)
				assert.NotContains(t, ev.kinds(), idem.EventOutcomeNotStored, "an outage is not a refusal: no substitute")
				assert.NotContains(t, ev.kinds(), idem.EventStoreError)
				clk.Advance(2 * tc.lease) // past the lease: a claim left PROCESSING would be taken over now
				v, err = call(t.Context(), ex, m, "order-1", pay)
				require.NoError(t, err)
				assert.Equal(t, 101, v, "a retry after the lease replays the stored outcome")
				assert.Equal(t, 1, runs, "the method ran exactly once")
			})
		}
	}
}

// TestDoReleasesThroughPassingErrors: a method's own transient error while
// the store answers with an error that can pass: the release is retried in
// the background until it passes, so a retry runs without waiting out the
// lease.
func TestDoReleasesThroughPassingErrors(t *testing.T) {
	const lease = 10 * time.Second
	errMethod := errors.New("upstream timeout")
	for _, pe := range passingErrors {
		t.Run(pe.class, func(t *testing.T) {
			clk := newFakeClock(true)
			st := newOutageStore(clk, pe.err, "complete", "renew", "claim", "release")
			released := make(chan struct{})
			var once sync.Once
			ex := idem.NewExecutor(noRenew{st}, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(lease), idem.WithObserver(func(e idem.Event) {
				if e.Kind == idem.EventReleased {
					once.Do(func() { close(released) })
				}
			}))
			m := &idem.Method{Op: "T.Pay", TTL: time.Hour}
			runs := 0
			pay := func(context.Context) (int, error) {
				runs++
				if runs == 1 {
					st.down(3 * time.Second)
					return 0, errMethod
				}
				return 7, nil
			}
			start := clk.Now()
			_, err := call(t.Context(), ex, m, "order-1", pay)
			require.ErrorIs(t, err, errMethod)
			guard := time.Now().Add(30 * time.Second) // turns a hang into a failure only
		wait:
			for {
				select {
				case <-released:
					break wait
				default:
				}
				if time.Now().After(guard) {
					t.Fatal("the claim was never released")
				}
				runtime.Gosched()
			}
			require.Less(t, clk.Now().Sub(start), lease, "released within the lease")
			v, err := call(t.Context(), ex, m, "order-1", pay)
			require.NoError(t, err, "a retry runs at once")
			assert.Equal(t, 7, v)
			assert.Equal(t, 2, runs)
		})
	}
}

// TestDoRefusalStillGetsSubstitute: an error no one marks as passing (a
// store's refusal, such as a constraint or a value the server rejects) is
// not an outage: after the executor's attempts the substitute is stored, so
// that a retry gets ErrOutcomeNotStored instead of a second execution.
func TestDoRefusalStillGetsSubstitute(t *testing.T) {
	clk := newFakeClock(true)
	refusal := &driverError{1366, "Incorrect string value"}
	// The executor's attempts (3) are refused; the substitute then passes.
	st := &countedRefusals{outageStore: newOutageStore(clk, nil), left: 3, err: refusal}
	var ev eventLog
	ex := idem.NewExecutor(noRenew{st}, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(5*time.Second), idem.WithObserver(ev.observe))
	m := &idem.Method{Op: "T.Pay", TTL: time.Hour}
	runs := 0
	pay := func(context.Context) (int, error) { runs++; return 1, nil }
	v, err := call(t.Context(), ex, m, "order-1", pay)
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	assert.Contains(t, ev.kinds(), idem.EventOutcomeNotStored)
	clk.Advance(time.Minute)
	_, err = call(t.Context(), ex, m, "order-1", pay)
	assert.ErrorIs(t, err, idem.ErrOutcomeNotStored)
	assert.Equal(t, 1, runs)
}

// countedRefusals refuses the first left Complete calls with err.
type countedRefusals struct {
	*outageStore
	mu   sync.Mutex
	left int
	err  error
}

func (s *countedRefusals) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	s.mu.Lock()
	refuse := s.left > 0
	s.left--
	s.mu.Unlock()
	if refuse {
		return s.err
	}
	return s.outageStore.Complete(ctx, key, token, out, ttl)
}

// TestDoSubstituteThroughPassingErrors: a store that refuses the outcome
// (the executor's attempts) and then answers with an error that can pass
// (a read-only database) for 3 s of a 5 s lease: the substitute is kept
// through the outage like any outcome, and stored once it passes; the
// method ran once and retries get ErrOutcomeNotStored.
func TestDoSubstituteThroughPassingErrors(t *testing.T) {
	clk := newFakeClock(true)
	readOnly := &sqlError{"25006", "ERROR: cannot execute UPDATE in a read-only transaction"}
	st := &countedRefusals{outageStore: newOutageStore(clk, readOnly, "complete", "release", "renew"), left: 3, err: &driverError{1366, "Incorrect string value"}}
	var ev eventLog
	ex := idem.NewExecutor(noRenew{st}, idem.SingleTenant(), idem.WithClock(clk), idem.WithLease(5*time.Second), idem.WithObserver(ev.observe))
	m := &idem.Method{Op: "T.Pay", TTL: time.Hour}
	runs := 0
	pay := func(context.Context) (int, error) {
		runs++
		st.down(3 * time.Second) // the refusals come first, then the read-only answers
		return 1, nil
	}
	v, err := call(t.Context(), ex, m, "order-1", pay)
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	assert.Greater(t, st.count("complete"), 1, "the substitute met the outage")
	assert.Contains(t, ev.kinds(), idem.EventOutcomeNotStored)
	assert.NotContains(t, ev.kinds(), idem.EventStoreError)
	clk.Advance(time.Minute)
	_, err = call(t.Context(), ex, m, "order-1", pay)
	assert.ErrorIs(t, err, idem.ErrOutcomeNotStored)
	assert.Equal(t, 1, runs)
}
