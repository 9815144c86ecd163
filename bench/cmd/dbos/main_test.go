package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
)

// TestPeersReplayWithoutRunning runs each of the four peers against the
// test PostgreSQL server: a first call, two replays, concurrent duplicates
// of a new key, a retry with another payload and calls without a key. The
// benchmark measures them only if each keeps its guarantee: one execution
// and one row per key, and every replay returns the first call's receipt.
// It also pins what the printed "what each peer checks" table says of DBOS
// v1.8.0 (payloads not compared, no key means a random workflow ID).
func TestPeersReplayWithoutRunning(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx := context.Background()
	e, err := newEnv(ctx, dsn, 8, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.close(ctx); err != nil {
			t.Error(err)
		}
	})
	for _, p := range e.peers {
		o := newOrder()
		for call := range 3 {
			r, err := p.place(ctx, o)
			if err != nil {
				t.Fatalf("%s, call %d: %v", p.name, call, err)
			}
			if err := same(r, o); err != nil {
				t.Fatalf("%s, call %d: %v", p.name, call, err)
			}
		}
		if n := p.table.Runs.Load(); n != 1 {
			t.Errorf("%s: 3 calls with one key: %d executions, want 1", p.name, n)
		}
	}
	if _, err := e.check(ctx); err != nil { // one row per key, counted in the tables
		t.Fatal(err)
	}
	// The probes: the calls without a key add rows that check would count
	// as a second execution for DBOS (two calls, two random workflow IDs).
	for _, p := range e.peers {
		t.Run(p.name, func(t *testing.T) {
			f, err := probe(ctx, p, 2, 3)
			if err != nil {
				t.Fatal(err)
			}
			if f.dupRuns != 2 || f.dupOK != 6 {
				t.Errorf("concurrent duplicates: %s; want 2 executions and 6 receipts", f.duplicates())
			}
			dbosPeer := p.name == dbosStep || p.name == dbosTxn
			switch {
			case dbosPeer && !f.mismatchReplayed:
				t.Errorf("DBOS, another payload: got %s, want the first receipt", f.mismatch())
			case !dbosPeer && !errors.Is(f.mismatchErr, idem.ErrPayloadMismatch):
				t.Errorf("idemgen, another payload: got %s, want idem.ErrPayloadMismatch", f.mismatch())
			}
			switch {
			case dbosPeer && (f.missingErr != nil || f.missingRuns != 2):
				t.Errorf("DBOS, no key: got %s, want 2 executions", f.missing())
			case !dbosPeer && (!errors.Is(f.missingErr, idem.ErrMissingKey) || f.missingRuns != 0):
				t.Errorf("idemgen, no key: got %s, want idem.ErrMissingKey", f.missing())
			}
		})
	}
}
