package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/idemctl"
	"github.com/idemgen/idemgen/internal/storeopen"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// TestSQLite runs get, stats and forget on a SQLite file, and names
// Migrate for a file never migrated.
func TestSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := sqlitestore.New(db)
	run := func(args ...string) (int, string, string) {
		var out, errw bytes.Buffer
		code := idemctl.Run(ctx, args, &out, &errw, storeopen.Openers{"sqlite": openSQLite})
		return code, out.String(), errw.String()
	}
	code, _, errw := run("--dsn", "sqlite:"+path, "stats")
	if code != 1 || !strings.Contains(errw, "Migrate") {
		t.Fatalf("unmigrated: code %d, %s", code, errw)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	k, _ := idem.NewKey("acme", "billing.Charge", "order-7")
	if _, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 5, Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, k, 5, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(`{"ok":1}`)}, time.Hour); err != nil {
		t.Fatal(err)
	}
	code, out, errw := run("--dsn", "sqlite:"+path, "get", "--tenant", "acme", "--op", "billing.Charge", "order-7")
	if code != 0 || !strings.Contains(out, "SUCCEEDED") || !strings.Contains(out, `{"ok":1}`) {
		t.Fatalf("get: %d\n%s%s", code, out, errw)
	}
	code, out, errw = run("--dsn", "sqlite:"+path, "stats")
	if code != 0 || !strings.Contains(out, "billing.Charge") {
		t.Fatalf("stats: %d\n%s%s", code, out, errw)
	}
	code, out, errw = run("--dsn", "sqlite:"+path, "forget", k.Hex(), "--token", "5", "--status", "SUCCEEDED", "--by", "t")
	if code != 0 || !strings.Contains(out, "forgotten") {
		t.Fatalf("forget: %d\n%s%s", code, out, errw)
	}
	code, _, errw = run("--dsn", "sqlite:"+filepath.Join(t.TempDir(), "none.db"), "stats")
	if code != 2 || !strings.Contains(errw, "database file") {
		t.Fatalf("missing file: %d %s", code, errw)
	}
}
