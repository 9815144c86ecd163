package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
)

// TestDemo plays every story and checks that money moved exactly as often as
// it should: once per paid order, never for the refused one.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, "memory", false), out.String())
	s := out.String()
	require.NotContains(t, s, "WRONG")
	for _, line := range []string{
		"click 1: receipt pay_0001",
		"click 2: receipt pay_0001",
		"attempt 2: replayed receipt pay_0002",
		"refused: idem: key reused with a different payload",
		"gateway authorizations: 1",
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
	dsn := testenv.PostgresDSN(t)
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, dsn, false), out.String())
	s := out.String()
	require.NotContains(t, s, "WRONG")
	for _, line := range []string{
		"PostgreSQL, ledger rows in the record's transaction",
		"refused: idem: key reused with a different payload",
		"the crash rolled back worker 1's transaction",
		"A-1001: 1 (want 1) ok",
		"D-4001: 1 (want 1) ok",
		"delivery 2: handled; order A-1001 has 42 points",
	} {
		require.True(t, strings.Contains(s, line), "output lacks %q:\n%s", line, s)
	}
}
