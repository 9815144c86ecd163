package pgstore_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestProbeInsertConflict runs the statements of ClaimTx's batch by hand,
// with a lease-mode claim of the same key committed between probe (which
// found no row: 'fresh') and the insert: the insert claims nothing, and the
// full claim statement, run next under the key's lock as ClaimTx does,
// answers the lease-mode record (the one case where the insert leaves the
// key to it without probe having seen a row). Both modes on one table is a
// misuse (use one mode per table); the answer is still the record.
func TestProbeInsertConflict(t *testing.T) {
	pool := newPool(t, 4, nil)
	table := newTable(t, pool)
	txs := pgstore.NewTx(pool, pgstore.WithTable(table))
	lease := pgstore.New(pool, pgstore.WithTable(table))
	probe, insert, claim := txs.PlainTxSQL()
	ctx := context.Background()
	k := key(t, "t", "conflict-"+randHex(4))
	req := claimReq(k, "payload", time.Minute, time.Hour)
	args := []any{k.ID[:], int64(req.Token), []byte(k.Tenant), []byte(k.Op), []byte(k.Text),
		req.Fingerprint[:], time.Minute.Microseconds(), time.Hour.Microseconds(), int32(0)}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var busy *int16
	var skip [8]any
	dst := []any{&skip[0], &skip[1], &skip[2], &skip[3], &skip[4], &skip[5], &skip[6], &skip[7], &busy}
	require.NoError(t, tx.QueryRow(ctx, probe, int64(binary.BigEndian.Uint64(k.ID[:8])), k.ID[:], int32(1), int32(2)).Scan(dst...))
	require.NotNil(t, busy)
	require.EqualValues(t, 3, *busy, "locked, and the key has no row")

	other := claimReq(k, "payload", time.Minute, time.Hour)
	c, err := lease.Claim(ctx, other)
	require.NoError(t, err)
	require.True(t, c.Claimed, "the lease-mode claim commits its row meanwhile")

	tag, err := tx.Exec(ctx, insert, args...)
	require.NoError(t, err)
	assert.EqualValues(t, 0, tag.RowsAffected(), "the insert yields to the committed row")

	rows, err := tx.Query(ctx, claim, args...)
	require.NoError(t, err)
	got, err := pgx.CollectOneRow(rows, func(r pgx.CollectableRow) (idem.Status, error) {
		var (
			claimed, taken bool
			status         int16
			rest           [8]any
		)
		err := r.Scan(&claimed, &taken, &status, &rest[0], &rest[1], &rest[2], &rest[3], &rest[4], &rest[5], &rest[6], &rest[7])
		if claimed {
			return 0, err
		}
		return idem.Status(status), err
	})
	require.NoError(t, err)
	assert.Equal(t, idem.StatusProcessing, got, "the full claim statement answers the lease-mode claim, in progress")
}
