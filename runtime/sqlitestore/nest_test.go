package sqlitestore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// edgeMethod is a door's claim (idemhttp's, in transactional mode) above a
// wrapped method.
var edgeMethod = idem.Method{Op: "POST /orders", TTL: time.Hour}

// edge is a door's Do: fn is its handler, calling wrapped methods.
func edge(ctx context.Context, ex *idem.Executor, key string, fn func(ctx context.Context) (string, error)) (string, error) {
	var k idem.KeyParts
	k.String("key", key)
	var h idem.Hasher
	h.String(key)
	return idem.Do(ctx, ex, &edgeMethod, &k, &h, fn)
}

// TestNestedInDoor: a wrapped method called by a handler behind a
// transactional door on the same TxStore claims its key inside the door's
// transaction (before, every such call failed at once: the door's
// transaction holds SQLite's only write lock). Each case says what the
// file holds after the door's call: the inner record and the inner write
// commit with the door's outcome, or with nothing.
func TestNestedInDoor(t *testing.T) {
	for _, c := range []struct {
		name string
		// inner's method and the handler's answer once inner returned
		inner, handler func(ctx context.Context, id string, innerErr error) (string, error)
		wantOrders     int  // rows written by inner and committed
		wantInnerRuns  int  // inner's runs after a second call of inner on its own
		wantDoorErr    bool // the door's call fails
		innerFinal     bool // inner's error is final (replayed)
	}{
		{
			name:          "BothCommit",
			inner:         func(context.Context, string, error) (string, error) { return "placed", nil },
			handler:       func(_ context.Context, _ string, err error) (string, error) { return "door ok", err },
			wantOrders:    1,
			wantInnerRuns: 1, // the second call replays
		},
		{
			name:          "DoorFailsTransientRollsBackInner",
			inner:         func(context.Context, string, error) (string, error) { return "placed", nil },
			handler:       func(context.Context, string, error) (string, error) { return "", errors.New("handler broke") },
			wantDoorErr:   true,
			wantOrders:    1, // written by the second, stand-alone call
			wantInnerRuns: 2, // rolled back with the door: runs again
		},
		{
			name:          "InnerFinalKeepsDoorUsable",
			inner:         func(context.Context, string, error) (string, error) { return "", errDeclined },
			handler:       func(_ context.Context, _ string, err error) (string, error) { return "door ok: " + err.Error(), nil },
			wantOrders:    0, // the final error discards inner's write
			wantInnerRuns: 1, // its final error is replayed
			innerFinal:    true,
		},
		{
			name:          "InnerTransientReleased",
			inner:         func(context.Context, string, error) (string, error) { return "", errors.New("ledger busy") },
			handler:       func(context.Context, string, error) (string, error) { return "door ok", nil },
			wantOrders:    1, // the second, stand-alone call writes (see below)
			wantInnerRuns: 2,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, _ := openDB(t)
			withOrders(t, db)
			ex := idem.NewExecutor(sqlitestore.NewTx(db, sqlitestore.WithLockTimeout(time.Hour)), idem.SingleTenant())
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang guard: a claim waiting for its caller's lock
			defer cancel()
			id := "o-" + t.Name()
			runs := 0
			innerCall := func(ctx context.Context) (string, error) {
				return place(ctx, ex, &placeMethod, id, 100, func(ctx context.Context) (string, error) {
					runs++
					if err := insertOrder(ctx, db, id, 100); err != nil {
						return "", err
					}
					if runs > 1 {
						return "placed", nil // the stand-alone second call succeeds
					}
					return c.inner(ctx, id, nil)
				})
			}
			_, err := edge(ctx, ex, "door-"+id, func(ctx context.Context) (string, error) {
				_, ierr := innerCall(ctx)
				if c.innerFinal {
					require.ErrorIs(t, ierr, errDeclined)
				} else if !c.wantDoorErr && c.wantInnerRuns == 1 {
					require.NoError(t, ierr)
				}
				return c.handler(ctx, id, ierr)
			})
			if c.wantDoorErr {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			_, err = innerCall(ctx)
			if c.innerFinal {
				require.ErrorIs(t, err, errDeclined, "the final error is replayed")
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, c.wantInnerRuns, runs, "inner's runs")
			assert.Equal(t, c.wantOrders, orders(t, db), "committed rows")
		})
	}
}

// TestNestedAfterDoorEnded: a wrapped method called, with the door's
// context, after the door's call ended is refused with ErrOuterTxDone and
// runs nothing.
func TestNestedAfterDoorEnded(t *testing.T) {
	db, _ := openDB(t)
	withOrders(t, db)
	ex := idem.NewExecutor(sqlitestore.NewTx(db), idem.SingleTenant())
	var late context.Context
	_, err := edge(t.Context(), ex, "door-late", func(ctx context.Context) (string, error) {
		late = ctx
		return "door ok", nil
	})
	require.NoError(t, err)
	ran := false
	_, err = place(late, ex, &placeMethod, "late", 1, func(context.Context) (string, error) { ran = true; return "x", nil })
	require.ErrorIs(t, err, sqlitestore.ErrOuterTxDone)
	assert.False(t, ran)
}
