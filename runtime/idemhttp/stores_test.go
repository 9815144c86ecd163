package idemhttp_test

import (
	"testing"

	"github.com/idemgen/idemgen/internal/testenv/everystore"
)

// onEveryStore runs test, in parallel with the other tests, on every store
// of everystore (memstore; pgstore in lease and transactional mode, plain
// and partitioned; mysqlstore in both modes; redisstore on one server and
// on the test Redis Cluster; tiered in both modes). A missing server skips
// its subtest, or fails it under CI=true.
func onEveryStore(t *testing.T, test func(t *testing.T, newStore newStoreFunc)) {
	t.Parallel()
	everystore.Run(t, "idemhttp_test_", func(t *testing.T, newStore everystore.NewStore) {
		t.Parallel()
		test(t, newStoreFunc(newStore))
	})
}
