package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/internal/stress"
	"github.com/idemgen/idemgen/internal/stress/stresstest"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// TestStorm runs the duplicate storm of internal/stress (the generated
// billing wrapper, concurrent duplicates, stalls and takeovers, the sweeper,
// every history checked for linearizability with porcupine) on sqlitestore
// in lease mode, a fresh database file per scenario.
func TestStorm(t *testing.T) {
	b := stress.Backend{Name: "sqlite", Open: func(ctx context.Context, _ stress.Servers) (*stress.Handle, error) {
		db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "storm.db"))
		if err != nil {
			return nil, err
		}
		s := sqlitestore.New(db)
		if err := s.Migrate(ctx); err != nil {
			_ = db.Close()
			return nil, err
		}
		return &stress.Handle{Store: s, Sweep: s.Sweep, Close: func() { _ = db.Close() }}, nil
	}}
	for _, sc := range stress.Scenarios() {
		if sc.Applies != nil && !sc.Applies(b.Name) {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) { stresstest.RunScenario(t, sc, b, stress.Options{}) })
	}
}
