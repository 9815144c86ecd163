package mysqlstore

import (
	"context"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Committed is the question a transactional Complete asks after a failure
// the server did not answer: is the claim's outcome committed?
func Committed(ctx context.Context, t idem.Txn) bool { return t.(*txn).committed(ctx) }
