package stress

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemgen/idemgen/runtime/idem"
)

// brokenStore is a small in-memory store with a chosen bug, to show that the
// harness catches what a broken store does.
type brokenStore struct {
	takeLiveLease bool // Claim takes over a same-payload lease that is still live
	noFencing     bool // Complete ignores the token

	mu   sync.Mutex
	recs map[[32]byte]*brokenRec
}

type brokenRec struct {
	fp         idem.Fingerprint
	token      idem.Token
	status     idem.Status
	leaseUntil time.Time
	expiresAt  time.Time
	out        idem.Outcome
}

func (s *brokenStore) Claim(_ context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	r := s.recs[req.Key.ID]
	if r != nil && !now.Before(r.expiresAt) {
		r = nil
	}
	switch {
	case r == nil:
		s.recs[req.Key.ID] = &brokenRec{fp: req.Fingerprint, token: req.Token, status: idem.StatusProcessing,
			leaseUntil: now.Add(req.Lease), expiresAt: now.Add(req.TTL)}
		return idem.Claim{Claimed: true}, nil
	case r.status == idem.StatusProcessing && r.fp == req.Fingerprint && (s.takeLiveLease || !now.Before(r.leaseUntil)):
		r.token, r.leaseUntil, r.expiresAt = req.Token, now.Add(req.Lease), now.Add(req.TTL)
		return idem.Claim{Claimed: true, TakenOver: true}, nil
	}
	rec := idem.Record{Status: r.status, Fingerprint: r.fp, Token: r.token, Outcome: r.out}
	if r.status == idem.StatusProcessing {
		rec.LeaseLeft = max(r.leaseUntil.Sub(now), 0)
	}
	return idem.Claim{Record: rec}, nil
}

func (s *brokenStore) Complete(_ context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[key.ID]
	if r == nil || (!s.noFencing && (r.status != idem.StatusProcessing || r.token != token)) {
		return idem.ErrLeaseLost
	}
	r.status, r.out, r.expiresAt = out.Status, out, time.Now().Add(ttl)
	return nil
}

func (s *brokenStore) Release(_ context.Context, key idem.Key, token idem.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[key.ID]
	if r == nil || r.status != idem.StatusProcessing || r.token != token {
		return idem.ErrLeaseLost
	}
	delete(s.recs, key.ID)
	return nil
}

func brokenBackend(name string, s *brokenStore) Backend {
	return Backend{Name: name, Open: func(context.Context, Servers) (*Handle, error) {
		s.recs = map[[32]byte]*brokenRec{}
		return &Handle{Store: s}, nil
	}}
}

// TestCatchesBrokenStores: a store that takes over live leases executes
// keys twice, and one without fencing lets a zombie overwrite an outcome;
// both histories must be found not linearizable, and the runs must fail.
func TestCatchesBrokenStores(t *testing.T) {
	cases := []struct {
		name string
		sc   Scenario
		s    *brokenStore
	}{
		{"take-live-lease", Stall(), &brokenStore{takeLiveLease: true}},
		{"no-fencing", Stall(), &brokenStore{noFencing: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := Run(t.Context(), c.sc, brokenBackend(c.name, c.s), Options{Short: true, VizDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res.Line())
			if res.OK() {
				t.Fatal("the run passed on a broken store")
			}
			if res.Check.Result != porcupine.Illegal {
				t.Errorf("history check = %v, want Illegal", res.Check.Result)
			}
			// The illegal partition, as text: one operation a line, in
			// call order, with its answer.
			dump, err := os.ReadFile(res.Check.Dump)
			if err != nil {
				t.Fatalf("the dump of the illegal history: %v", err)
			}
			lines := strings.Split(strings.TrimSpace(string(dump)), "\n")
			if len(lines) < 2 || !strings.Contains(string(dump), "claim(") || !strings.Contains(lines[0], " -> ") {
				t.Errorf("dump of the illegal history:\n%s", dump)
			}
			for i, f := range res.Failures {
				if i < 3 {
					t.Log("caught:", f)
				}
			}
		})
	}
}
