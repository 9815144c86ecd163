package idemhttp_test

import (
	"testing"

	"github.com/idemgen/idemgen/internal/testenv/everystore"
	"github.com/idemgen/idemgen/runtime/idemhttp/idemhttptest"
)

// TestConformance runs the shared HTTP suite (idemhttptest) on net/http
// (idemhttptest.NetHTTP), on every store (everystore: MySQL and MySQLTx
// among them; sqlitestore runs it in its own module).
func TestConformance(t *testing.T) {
	everystore.Run(t, "idemhttp_conf_", func(t *testing.T, newStore everystore.NewStore) {
		idemhttptest.Run(t, idemhttptest.Options{NewStore: newStore, Mount: idemhttptest.NetHTTP})
	})
}
