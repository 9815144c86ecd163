package idemtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// doTxSessionLost: the database session of a transactional call ends while
// its method runs (a failover, a server restart, an operator's KILL), and
// the method then ends in each way a method can end. Whichever way, the
// call did not happen: the store raises no panic of its own, the caller
// gets an error (the method's own when it failed transiently or panicked),
// nothing is stored, and a retry runs the method once and is replayed.
func (s *suite) doTxSessionLost(t testing.TB) {
	if s.BreakTx == nil {
		t.Skip("Options.BreakTx is nil: the store's transaction has no session to lose")
	}
	e := s.env(t)
	ex := s.executor(e)
	m := testMethod
	m.Final = []idem.FinalError{{Name: "errDeclined", Err: errDeclined}}
	errReset := errors.New("connection reset")
	boom := new(int) // the method's panic value, told apart by identity
	endings := []struct {
		name string
		end  func() (string, error)
		want error // the first call's error wraps it; nil: any error
	}{
		{"success", func() (string, error) { return "lost-receipt", nil }, nil},
		{"final-error", func() (string, error) { return "", fmt.Errorf("charge: %w", errDeclined) }, nil},
		{"transient-error", func() (string, error) { return "", errReset }, errReset},
		{"panic", func() (string, error) { panic(boom) }, nil},
	}
	for _, end := range endings {
		id := "order-session-lost-" + end.name
		runs := 0
		var err error
		panicked := func() (p any) {
			defer func() { p = recover() }()
			_, err = charge(e.ctx, ex, &m, id, "100", func(ctx context.Context) (string, error) {
				runs++
				requireNoError(t, s.BreakTx(ctx), "%s: Options.BreakTx", end.name)
				return end.end()
			})
			return nil
		}()
		if end.name == "panic" {
			assertTrue(t, panicked == boom, "%s: the method's own panic is re-raised, no other: %v", end.name, panicked)
		} else {
			assertTrue(t, panicked == nil, "%s: a lost session raises no panic: %v", end.name, panicked)
			requireError(t, err, "%s: the outcome could not be stored with the method's writes: the call did not happen", end.name)
			if end.want != nil {
				assertErrorIs(t, err, end.want, "%s", end.name)
			}
			assertFalse(t, errors.Is(err, errDeclined), "%s: a final error that was not stored is not the answer: %v", end.name, err)
		}
		retry := func(context.Context) (string, error) { runs++; return "receipt-" + end.name, nil }
		v, err := charge(e.ctx, ex, &m, id, "100", retry)
		// The server ends the lost session's locks asynchronously: until
		// it has, a retry is told the call is in progress. The deadline
		// bounds a hang only; it never decides the outcome.
		for deadline := time.Now().Add(30 * time.Second); errors.Is(err, idem.ErrInProgress) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			v, err = charge(e.ctx, ex, &m, id, "100", retry)
		}
		requireNoError(t, err, "%s: the retry runs", end.name)
		assertEqual(t, "receipt-"+end.name, v, end.name)
		v, err = charge(e.ctx, ex, &m, id, "100", retry)
		requireNoError(t, err, "%s: replayed", end.name)
		assertEqual(t, "receipt-"+end.name, v, end.name)
		assertEqual(t, 2, runs, "%s: the lost call and its retry ran; the replay did not", end.name)
	}
}
