package sqlitestore_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// The kill test re-executes the test binary as a child that writes to a
// database file, reporting every decided step on stdout, and SIGKILLs it at
// chosen points: then the parent reopens the file.
const (
	childEnv    = "SQLITESTORE_KILL_CHILD" // mode:path:blockAt
	childLease  = time.Minute
	childTTL    = 24 * time.Hour
	childOp     = "kill.Op"
	childTenant = "kill"
)

func childKey(i int) idem.Key {
	var parts idem.KeyParts
	parts.String("id", strconv.Itoa(i))
	k, err := parts.Key(childTenant, childOp)
	if err != nil {
		panic(err)
	}
	return k
}

func childBody(i int) string { return "outcome-" + strconv.Itoa(i) }

// TestKillChild is the child's body; it runs only under childEnv. In lease
// mode it claims key i and completes it (every third key is left
// PROCESSING); in transactional mode it calls a method that writes an order
// row and returns (every third call ends with a final error). It reports
// "claimed i" and "completed i" (lease mode) or "done i" (transactional)
// after the store answered, and, at blockAt, blocks after the claim (lease)
// or inside the method after its write (transactional), reporting "blocked".
func TestKillChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("only run as the kill test's child")
	}
	parts := strings.SplitN(spec, ":", 3)
	mode, blockAt, path := parts[0], atoi(parts[1]), parts[2]
	db, err := sqlitestore.Open(path)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	say := func(format string, args ...any) { fmt.Printf("EV "+format+"\n", args...) }
	if mode == "lease" {
		s := sqlitestore.New(db)
		for i := 0; ; i++ {
			req := idem.ClaimRequest{Key: childKey(i), Fingerprint: fp("p"), Token: idem.Token(i + 1), Lease: childLease, TTL: childTTL}
			c, err := s.Claim(ctx, req)
			if err != nil || !c.Claimed {
				panic(fmt.Sprint("claim ", i, err))
			}
			say("claimed %d", i)
			if i == blockAt {
				say("blocked")
				select {}
			}
			if i%3 == 2 {
				continue
			}
			if err := s.Complete(ctx, req.Key, req.Token, succeeded(childBody(i)), childTTL); err != nil {
				panic(err)
			}
			say("completed %d", i)
		}
	}
	ex := idem.NewExecutor(sqlitestore.NewTx(db), idem.WithTenant(func(context.Context) string { return childTenant }))
	m := idem.Method{Op: childOp, TTL: childTTL, Final: []idem.FinalError{{Name: "errDeclined", Err: errDeclined}}}
	for i := 0; ; i++ {
		var k idem.KeyParts
		k.String("id", strconv.Itoa(i))
		var h idem.Hasher
		h.String("p")
		_, err := idem.Do(ctx, ex, &m, &k, &h, func(ctx context.Context) (string, error) {
			if err := insertOrder(ctx, db, strconv.Itoa(i), int64(i)); err != nil {
				return "", err
			}
			if i == blockAt {
				say("blocked")
				select {}
			}
			if i%3 == 2 {
				return "", errDeclined
			}
			return childBody(i), nil
		})
		if err != nil && !errors.Is(err, errDeclined) {
			panic(err)
		}
		say("done %d", i)
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// runChild starts the child on path and SIGKILLs it once it reported
// "blocked" or after lines reports; it returns the reported events.
func runChild(t *testing.T, mode, path string, blockAt, lines int) map[string]bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d:%s", childEnv, mode, blockAt, path))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	seen := map[string]bool{}
	sc := bufio.NewScanner(out)
	n := 0
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "EV ")
		if !ok {
			continue
		}
		seen[line] = true
		n++
		if line == "blocked" || n >= lines {
			break
		}
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.True(t, n >= lines || seen["blocked"], "the child reported %d events before it ended", n)
	return seen
}

// TestKillAndReopen kills a writing process at chosen points and reopens its
// file: every outcome the store acknowledged is replayed, a claim left
// PROCESSING holds for its lease and is taken over after it (by a clock
// moved past the lease), and in transactional mode a record exists if and
// only if its business row does.
func TestKillAndReopen(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, mode := range []string{"lease", "tx"} {
		for _, pt := range []struct{ blockAt, lines int }{{-1, 1}, {-1, 40}, {-1, 200}, {7, 1 << 30}} {
			t.Run(fmt.Sprintf("%s/block=%d/lines=%d", mode, pt.blockAt, pt.lines), func(t *testing.T) {
				db, path := openDB(t)
				withOrders(t, db)
				seen := runChild(t, mode, path, pt.blockAt, pt.lines)
				require.NoError(t, db.Close())
				db, err := sqlitestore.Open(path)
				require.NoError(t, err)
				t.Cleanup(func() { _ = db.Close() })
				var ok string
				require.NoError(t, db.QueryRow("PRAGMA integrity_check").Scan(&ok))
				require.Equal(t, "ok", ok)
				last := 0
				for ev := range seen {
					if f := strings.Fields(ev); len(f) == 2 {
						last = max(last, atoi(f[1]))
					}
				}
				if mode == "lease" {
					checkLease(t, db, seen, last)
				} else {
					checkTx(t, db, seen, last)
				}
			})
		}
	}
}

func checkLease(t *testing.T, db *sql.DB, seen map[string]bool, last int) {
	ctx := t.Context()
	now := sqlitestore.New(db)
	var later fakeClock
	later.Sleep(childLease + time.Minute)
	after := sqlitestore.New(db, later.option())
	for i := 0; i <= last+1; i++ {
		req := idem.ClaimRequest{Key: childKey(i), Fingerprint: fp("p"), Token: newToken(), Lease: childLease, TTL: childTTL}
		c, err := now.Claim(ctx, req)
		require.NoError(t, err)
		switch {
		case seen[fmt.Sprintf("completed %d", i)]:
			require.False(t, c.Claimed, "key %d: an acknowledged outcome is never lost", i)
			assert.Equal(t, childBody(i), string(c.Record.Outcome.Body), "key %d", i)
			continue
		case seen[fmt.Sprintf("claimed %d", i)]:
			require.False(t, c.Claimed, "key %d: a claim holds for its lease after the kill", i)
		}
		if c.Claimed {
			require.NoError(t, now.Release(ctx, req.Key, req.Token))
			continue // the claim the child never made
		}
		if c.Record.Status != idem.StatusProcessing {
			assert.Equal(t, childBody(i), string(c.Record.Outcome.Body), "key %d: completed just before the kill", i)
			continue
		}
		req.Token = newToken()
		c, err = after.Claim(ctx, req)
		require.NoError(t, err)
		assert.True(t, c.Claimed && c.TakenOver, "key %d: a PROCESSING record is taken over after its lease", i)
	}
}

func checkTx(t *testing.T, db *sql.DB, seen map[string]bool, last int) {
	ctx := t.Context()
	var processing int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM idem_records WHERE status = 1`).Scan(&processing))
	assert.Zero(t, processing, "no PROCESSING record survives a transactional call")
	s := sqlitestore.New(db)
	for i := 0; i <= last+1; i++ {
		var rows int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM orders WHERE id = ?`, strconv.Itoa(i)).Scan(&rows))
		req := idem.ClaimRequest{Key: childKey(i), Fingerprint: fp("p"), Token: newToken(), Lease: childLease, TTL: childTTL}
		r, err := s.Claim(ctx, req)
		require.NoError(t, err)
		if r.Claimed {
			require.NoError(t, s.Release(ctx, req.Key, req.Token))
		}
		decided := !r.Claimed
		if seen[fmt.Sprintf("done %d", i)] {
			require.True(t, decided, "key %d: an acknowledged outcome is never lost", i)
		}
		if !decided {
			assert.Zero(t, rows, "key %d: no business row without its record", i)
			continue
		}
		if i%3 == 2 {
			assert.Equal(t, idem.StatusFailedFinal, r.Record.Status, "key %d", i)
			assert.Zero(t, rows, "key %d: a final error's writes were discarded", i)
		} else {
			assert.Equal(t, idem.StatusSucceeded, r.Record.Status, "key %d", i)
			assert.Equal(t, 1, rows, "key %d: the business row committed with its record", i)
		}
	}
}
