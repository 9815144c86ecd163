package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
)

// kinds returns the names of the events' kinds, in order, and checks that
// they are all about one key: each story plays one key.
func kinds(t *testing.T, s story) []string {
	t.Helper()
	var names []string
	for _, ev := range s.events {
		require.Equal(t, s.events[0].Key.ID, ev.Key.ID, "story %q: every event is about one key", s.title)
		names = append(names, ev.Kind.String())
	}
	return names
}

// TestDemo plays every story and checks each story's claim twice: in the
// executor's events (what happened) and in the printed text (what it says
// happened), and that money moved exactly as often as it should: once per
// paid order, never for the refused one.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	stories, err := play(t.Context(), &out, "memory", false)
	require.NoError(t, err, out.String())
	s := out.String()
	require.NotContains(t, s, "WRONG")
	want := [][]string{
		// 1. two concurrent clicks: one runs, the other gets its receipt.
		{"claimed", "completed", "replayed"},
		// 2. the retry after the lost response is a replay.
		{"claimed", "completed", "replayed"},
		// 3. same key, other amount: a conflict, nothing runs.
		{"conflict"},
		// 4. a final error is stored and replayed.
		{"claimed", "completed", "replayed"},
		// 5. a transient error releases the key; the retry runs.
		{"claimed", "released", "claimed", "completed"},
		// 6. the stalled worker's lease lapses: the retry takes over (not a
		// plain claim) and completes; the stalled worker's late Complete
		// is fenced off.
		{"claimed", "taken_over", "completed", "lease_lost"},
		// 7. the redelivered message is a replay.
		{"claimed", "completed", "replayed"},
	}
	require.Len(t, stories, len(want))
	for i, w := range want {
		require.Equal(t, w, kinds(t, stories[i]), "story %d (%s): events", i+1, stories[i].title)
	}
	// 3. the refusal names the operation and the key (the default operation
	// name may be qualified by the package).
	require.Regexp(t, `refused: idem: \S*Service\.Pay: key [0-9a-f]{64} reused with a different payload`, s)
	lost := stories[5].events[3].Err
	require.ErrorIs(t, lost, idem.ErrLeaseLost, "story 6: the stalled worker's Complete is refused")
	for _, line := range []string{
		"click 1: receipt pay_0001",
		"click 2: receipt pay_0001",
		"attempt 2: replayed receipt pay_0002",
		"gateway authorizations: 1",
		"its 1s lease lapsed",
		"the retry took the lapsed key over under a new fencing token: receipt pay_0004",
		"worker 1 woke up: its debit carried the same key and moved no money, and its outcome was refused: ",
		"A-1001: 1 (want 1) ok",
		"B-2001: 0 (want 0) ok",
		"D-4001: 1 (want 1) ok",
		"delivery 2: handled; order A-1001 has 42 points",
	} {
		require.True(t, strings.Contains(s, line), "output lacks %q:\n%s", line, s)
	}
}

// TestDemoPostgres plays the stories on PostgreSQL in transactional mode: the
// ledger's rows commit with the idempotency record, so the counts come from
// the committed business table.
func TestDemoPostgres(t *testing.T) {
	checkSQLDemo(t, testenv.PostgresDSN(t), "PostgreSQL, ledger rows in the record's transaction")
}

// TestDemoMySQL plays the stories on MariaDB (or MySQL) in transactional
// mode, as TestDemoPostgres does on PostgreSQL.
func TestDemoMySQL(t *testing.T) {
	checkSQLDemo(t, "mysql://"+testenv.MySQLDSN(t), "MySQL/MariaDB, ledger rows in the record's transaction")
}

// checkSQLDemo plays the stories on the SQL store of dsn in transactional
// mode (banner: what the demo says it runs on) and checks them.
func checkSQLDemo(t *testing.T, dsn, banner string) {
	t.Helper()
	var out bytes.Buffer
	stories, err := play(t.Context(), &out, dsn, false)
	require.NoError(t, err, out.String())
	s := out.String()
	require.NotContains(t, s, "WRONG")
	require.Len(t, stories, 7)
	// 6. the crashed worker's transaction rolled back with its claim: the
	// retry claims a free key, nothing is taken over, nothing was stored
	// by the crashed worker.
	crash := kinds(t, stories[5])
	require.Equal(t, "claimed", crash[0])
	require.Equal(t, []string{"claimed", "completed"}, crash[len(crash)-2:], "story 6: %v", crash)
	require.NotContains(t, crash, "taken_over")
	require.Equal(t, []string{"conflict"}, kinds(t, stories[2]))
	require.Regexp(t, `refused: idem: \S*Service\.Pay: key [0-9a-f]{64} reused with a different payload`, s)
	require.Equal(t, []string{"claimed", "released", "claimed", "completed"}, kinds(t, stories[4]))
	for _, line := range []string{
		banner,
		"the crash rolled back worker 1's transaction",
		"A-1001: 1 (want 1) ok",
		"B-2001: 0 (want 0) ok",
		"D-4001: 1 (want 1) ok",
		"delivery 2: handled; order A-1001 has 42 points",
	} {
		require.True(t, strings.Contains(s, line), "output lacks %q:\n%s", line, s)
	}
}
