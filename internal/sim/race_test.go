//go:build race

package sim

// Under the race detector every baton hand-off costs some twenty times
// more, so TestSchedules runs 1,000 schedules there; make test also runs it
// without -race, at 10,000.
const raceEnabled = true
