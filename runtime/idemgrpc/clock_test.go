package idemgrpc_test

import (
	"time"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

// newFakeClock is an idemtest.FakeClock that starts at the wall clock's now,
// so that the deadlines grpc-go sets (by the wall clock) and the clock agree.
func newFakeClock() *idemtest.FakeClock { return idemtest.NewFakeClock(time.Now(), false) }
