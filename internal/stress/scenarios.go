package stress

import "time"

// Scenarios returns every scenario, in the order they run.
//
// To add one, write a function that returns a Scenario whose Configure
// adjusts the default storm (counts, fractions, stalled keys, expiring
// records) and, for faults of a server, appends a Background injector that
// acts through the Env (see Storm.Background); list it here.
func Scenarios() []Scenario {
	return []Scenario{Plain(), Stall(), StallAfterEffect(), Sweep(), RedisKill(), RedisLoseKey(), PGRestart(), StoreOutage(), StoreReadOnly(), PGKillBackend(),
		ClusterFailover(), ClusterReshard(), MySQLKill(), MySQLKillConnection()}
}

// Plain is the duplicate storm: every key retried several times
// concurrently (bursts of 8) and again later, with a few calls under
// another payload, transient gateway failures and customers without funds.
func Plain() Scenario {
	return Scenario{
		Name:  "plain",
		About: "10,000 calls over 100 keys, 32 workers; conflicts, transient and final errors",
	}
}

// Stall adds workers that stall past their lease before the side effect:
// the key's waiting duplicates take it over and finish it; the zombie then
// tries to store a final error (its Complete must get ErrLeaseLost) or
// releases after a transient one (its Release is fenced). Every key still
// executes once.
func Stall() Scenario {
	return Scenario{
		Name:  "stall",
		About: "workers stall past their lease before the side effect: takeover, fenced zombie",
		Configure: func(s *Storm) {
			s.StallFinal, s.StallTransient = 3, 2
			if s.Short {
				s.StallFinal, s.StallTransient = 2, 1
			}
		},
	}
}

// StallAfterEffect is the documented limit of lease mode: a worker that
// stalls past its lease AFTER its side effect has executed once, and the
// worker that takes the key over executes again; fencing only stops the
// zombie from storing its outcome (it gets ErrLeaseLost). The stalled keys
// are allowed, and expected, to execute twice; every other key once.
func StallAfterEffect() Scenario {
	return Scenario{
		Name:  "stall-after-effect",
		About: "documented: a stall after the side effect executes twice in lease mode",
		Configure: func(s *Storm) {
			s.StallAfter = 2
			if s.Short {
				s.StallAfter = 1
			}
		},
	}
}

// Sweep runs the storm while records of another operation expire (a TTL of
// 30ms instead of 7 days) and the store's sweeper deletes expired records
// every 2ms; the storm's own keys must keep one execution each, and the
// model checks that no record vanishes before its TTL and none outlives it.
func Sweep() Scenario {
	return Scenario{
		Name:  "sweep",
		About: "expired records swept while the storm runs",
		Configure: func(s *Storm) {
			s.Shipments, s.ShipmentKeys = s.Calls/2, s.Keys
			s.ShipmentTTL = 30 * time.Millisecond
			s.Sweep = 2 * time.Millisecond
		},
	}
}

// Find returns the scenario named name.
func Find(name string) (Scenario, bool) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
