package pgstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// TestNestedOutcomesKept runs every combination of endings of two and
// three stacked transactional calls that join one transaction (an edge
// layer over a wrapped method, a wrapped method calling another), and
// checks what commits against a model of the rules:
//
//   - a level that ends in success keeps what its inner levels kept, its
//     own record and the writes under it;
//   - a level that ends in a final error discards the writes under it
//     (its own and its inner levels'), and the records of inner successes
//     with them (a record without its writes would replay an effect that
//     never committed), but keeps the records of inner final errors (they
//     hold no writes: forgetting one would run an operation again that
//     already answered for good), and stores its own;
//   - a level that ends in a transient error (or propagates one) keeps
//     nothing;
//   - the outermost level commits what it kept, or nothing.
//
// Every level's record and the business rows are read back after each
// case.
func TestNestedOutcomesKept(t *testing.T) {
	pool := newPool(t, 4, nil)
	table := newTable(t, pool)
	store := pgstore.NewTx(pool, pgstore.WithTable(table))
	ex := idem.NewExecutor(store, idem.SingleTenant())
	l := newLedger(t, pool)
	errDeclined := errors.New("declined")
	errOwn := errors.New("refused by the outer level")
	errFlaky := errors.New("flaky")
	final := []idem.FinalError{{Name: "errDeclined", Err: errDeclined}, {Name: "errOwn", Err: errOwn}}

	innermost := []string{"success", "final", "transient"}
	outer := []string{"propagate", "swallow", "own-final", "transient"}
	var cases [][]string // outermost first, innermost's ending last
	for _, in := range innermost {
		for _, a := range outer {
			cases = append(cases, []string{a, in})
			for _, b := range outer {
				cases = append(cases, []string{b, a, in})
			}
		}
	}
	for n, c := range cases {
		t.Run(strings.Join(c, "/"), func(t *testing.T) {
			id := fmt.Sprintf("keep-%d-%s", n, randHex(4))
			depth := len(c)
			methods := make([]idem.Method, depth)
			for i := range methods {
				methods[i] = idem.Method{Op: fmt.Sprintf("Level%d", i+1), TTL: time.Hour, Final: final}
			}
			// The model: what each level keeps in its scope.
			type scope struct {
				status map[int]idem.Status // level → its record
				rows   int
			}
			var model func(i int) (scope, string)
			model = func(i int) (scope, string) {
				if i == depth-1 {
					switch c[i] {
					case "success":
						return scope{status: map[int]idem.Status{i: idem.StatusSucceeded}, rows: 1}, "success"
					case "final":
						return scope{status: map[int]idem.Status{i: idem.StatusFailedFinal}}, "final"
					}
					return scope{status: map[int]idem.Status{}}, "transient"
				}
				in, end := model(i + 1)
				switch c[i] {
				case "swallow":
					end = "success"
				case "own-final":
					end = "final"
				case "transient":
					end = "transient"
				}
				out := scope{status: map[int]idem.Status{}}
				switch end {
				case "success":
					out = in
					out.status[i] = idem.StatusSucceeded
				case "final":
					for lv, st := range in.status {
						if st == idem.StatusFailedFinal {
							out.status[lv] = st
						}
					}
					out.status[i] = idem.StatusFailedFinal
				}
				return out, end
			}
			want, _ := model(0)

			var level func(ctx context.Context, i int) (string, error)
			level = func(ctx context.Context, i int) (string, error) {
				var k idem.KeyParts
				k.String("id", id)
				var h idem.Hasher
				h.String(id)
				return idem.Do(ctx, ex, &methods[i], &k, &h, func(ctx context.Context) (string, error) {
					if i == depth-1 {
						tx, ok := pgstore.TxFrom(ctx)
						require.True(t, ok)
						if _, err := tx.Exec(ctx, "INSERT INTO "+l.table+" (id, amount) VALUES ($1, 1)", id); err != nil {
							return "", err
						}
						switch c[i] {
						case "final":
							return "", errDeclined
						case "transient":
							return "", errFlaky
						}
						return "charged", nil
					}
					v, err := level(ctx, i+1)
					switch c[i] {
					case "swallow":
						return "handled", nil
					case "own-final":
						return "", errOwn
					case "transient":
						return "", errFlaky
					}
					return v, err
				})
			}
			_, _ = level(t.Context(), 0)

			for i := range depth {
				k, err := idem.NewKey("", methods[i].Op, id)
				require.NoError(t, err)
				var st int16
				err = pool.QueryRow(t.Context(), "SELECT status FROM "+store.Table()+" WHERE key = $1", k.ID[:]).Scan(&st)
				if errors.Is(err, pgx.ErrNoRows) {
					st, err = 0, nil
				}
				require.NoError(t, err)
				assert.Equal(t, want.status[i], idem.Status(st), "level %d (%s): its committed record", i+1, c[i])
			}
			assert.Len(t, l.rows(t)[id], want.rows, "the business rows")
		})
	}
}

// TestNestedKeptRewriteFails: the rewrite of a kept nested final record
// fails (here a trigger refuses it) in the round trip that holds the key's
// lock at session level across the rollback. The call fails and commits
// nothing, and the connection does not go back to the pool holding that
// lock: the inner key can be locked from another session at once, and
// both levels run again and store their records once the fault is gone.
func TestNestedKeptRewriteFails(t *testing.T) {
	pool := newPool(t, 4, nil)
	table := newTable(t, pool)
	store := pgstore.NewTx(pool, pgstore.WithTable(table))
	ex := idem.NewExecutor(store, idem.SingleTenant())
	errDeclined := errors.New("declined")
	final := []idem.FinalError{{Name: "errDeclined", Err: errDeclined}}
	outer := idem.Method{Op: "Outer", TTL: time.Hour, Final: final}
	inner := idem.Method{Op: "Inner", TTL: time.Hour, Final: final}
	id := "rewrite-" + randHex(4)
	do := func(ctx context.Context, m *idem.Method, fn func(context.Context) (string, error)) (string, error) {
		var k idem.KeyParts
		k.String("id", id)
		var h idem.Hasher
		h.String(id)
		return idem.Do(ctx, ex, m, &k, &h, fn)
	}
	runs := 0
	call := func() (string, error) {
		return do(t.Context(), &outer, func(ctx context.Context) (string, error) {
			return do(ctx, &inner, func(context.Context) (string, error) { runs++; return "", errDeclined })
		})
	}
	// The trigger refuses the insert of a final record of Inner, which
	// only the rewrite does (a claim inserts PROCESSING, Complete updates).
	fn := "idem_test_refuse_" + randHex(4)
	_, err := pool.Exec(t.Context(), `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.op = 'Inner' AND NEW.status = 3 THEN RAISE EXCEPTION 'rewrite refused'; END IF;
	RETURN NEW;
END $$`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+fn+" CASCADE") })
	_, err = pool.Exec(t.Context(), "CREATE TRIGGER refuse BEFORE INSERT ON "+store.Table()+" FOR EACH ROW EXECUTE FUNCTION "+fn+"()")
	require.NoError(t, err)

	_, err = call()
	require.Error(t, err, "the outer call's outcome was not committed")
	assert.NotErrorIs(t, err, errDeclined)
	ik, err := idem.NewKey("", inner.Op, id)
	require.NoError(t, err)
	// From a session of its own: a pooled one might be the very session
	// that holds the lock, which can always take it again.
	other, err := pgx.Connect(t.Context(), testenv.PostgresDSN(t))
	require.NoError(t, err)
	defer other.Close(context.Background())
	// The call's session was closed by the client; the server ends it
	// (releasing its locks) once it reads the end of the connection,
	// which may come a moment after the call returned: wait for that,
	// bounded (a session still in the pool would hold the lock forever).
	require.Eventually(t, func() bool {
		var locked bool
		require.NoError(t, other.QueryRow(t.Context(), "SELECT pg_try_advisory_xact_lock($1::bigint)", lockOf(ik)).Scan(&locked))
		return locked
	}, 10*time.Second, time.Millisecond, "no session holds the inner key's lock")

	_, err = pool.Exec(t.Context(), "DROP TRIGGER refuse ON "+store.Table())
	require.NoError(t, err)
	_, err = call()
	require.ErrorIs(t, err, errDeclined)
	_, err = do(t.Context(), &inner, func(context.Context) (string, error) { runs++; return "ran", nil })
	require.ErrorIs(t, err, errDeclined, "the inner final error is kept")
	assert.Equal(t, 2, runs, "the failed call and its retry ran the inner method; the replay did not")
}

// lockOf is the key's advisory lock, as the store computes it: the first
// 8 bytes of its ID.
func lockOf(k idem.Key) int64 { return int64(binary.BigEndian.Uint64(k.ID[:8])) }
