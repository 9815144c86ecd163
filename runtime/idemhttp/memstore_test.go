package idemhttp_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func TestMemstore(t *testing.T) {
	runSuite(t, func(*testing.T) idem.Store { return memstore.New() })
}
