package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

var errGone = errors.New("gone (transient)")

// TestDecisions: the verdict an edge layer reads after its handler called
// wrapped methods, for each kind of call and for mixes of them; and that
// the calls nested inside a wrapped method are not recorded (the method's
// own call decides for them).
func TestDecisions(t *testing.T) {
	store := memstore.New()
	ex := idem.NewExecutor(store, idem.SingleTenant())
	final := errors.New("already done")
	m := idem.Method{Op: "Svc.Op", TTL: time.Minute, Final: []idem.FinalError{{Name: "final", Err: final}}}
	call := func(ctx context.Context, key string, fn func(context.Context) (string, error)) error {
		var k idem.KeyParts
		k.String("id", key)
		var h idem.Hasher
		h.String(key)
		_, err := idem.Do(ctx, ex, &m, &k, &h, fn)
		return err
	}
	ok := func(context.Context) (string, error) { return "ok", nil }
	// held is a key another caller holds, for a refusal (in progress).
	held := "held"
	hk, err := idem.NewKey("", m.Op, held)
	if err != nil {
		t.Fatal(err)
	}
	var hh idem.Hasher
	hh.String(held)
	hfp, _ := hh.Sum()
	if _, err := store.Claim(t.Context(), idem.ClaimRequest{Key: hk, Fingerprint: hfp, Token: 1, Lease: time.Minute, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}

	type step func(ctx context.Context, n int) error
	success := func(ctx context.Context, n int) error { return call(ctx, fmt.Sprint("s", n), ok) }
	finalErr := func(ctx context.Context, n int) error {
		return call(ctx, fmt.Sprint("f", n), func(context.Context) (string, error) { return "", final })
	}
	transient := func(ctx context.Context, n int) error {
		return call(ctx, fmt.Sprint("t", n), func(context.Context) (string, error) { return "", errGone })
	}
	replay := func(ctx context.Context, n int) error {
		key := fmt.Sprint("r", n)
		if err := call(context.Background(), key, ok); err != nil { // stored outside the cell
			return err
		}
		return call(ctx, key, ok)
	}
	refused := func(ctx context.Context, _ int) error { return call(ctx, held, ok) }
	// nestedTransient: a wrapped method that handles its inner call's
	// transient error and succeeds: the outer call decides (stored).
	nestedTransient := func(ctx context.Context, n int) error {
		return call(ctx, fmt.Sprint("n", n), func(ctx context.Context) (string, error) {
			_ = call(ctx, fmt.Sprint("ni", n), func(context.Context) (string, error) { return "", errGone })
			return "handled", nil
		})
	}
	// replayFinal: a final error stored outside the cell, replayed in it.
	replayFinal := func(ctx context.Context, n int) error {
		key := fmt.Sprint("rf", n)
		_ = call(context.Background(), key, func(context.Context) (string, error) { return "", final })
		return call(ctx, key, ok)
	}
	cases := []struct {
		name     string
		steps    []step
		want     idem.Decision
		replayed bool // Decisions.Replayed: a call was answered by a stored outcome
	}{
		{"no call", nil, idem.Undecided, false},
		{"success", []step{success}, idem.Stored, false},
		{"final error", []step{finalErr}, idem.Stored, false},
		{"replay", []step{replay}, idem.Stored, true},
		{"replayed final error", []step{replayFinal}, idem.Stored, true},
		{"success then replay", []step{success, replay}, idem.Stored, true},
		{"transient error", []step{transient}, idem.Released, false},
		{"refused: in progress", []step{refused}, idem.Released, false},
		{"stored then released", []step{success, transient}, idem.Released, false},
		{"released then stored", []step{transient, finalErr}, idem.Released, false},
		{"inner transient handled by a wrapped method", []step{nestedTransient}, idem.Stored, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d idem.Decisions
			ctx := idem.WithDecisions(t.Context(), &d)
			for j, s := range c.steps {
				_ = s(ctx, i*10+j)
			}
			if got := d.Verdict(); got != c.want {
				t.Fatalf("verdict %v, want %v", got, c.want)
			}
			if got := d.Replayed(); got != c.replayed {
				t.Fatalf("Replayed() = %v, want %v", got, c.replayed)
			}
		})
	}
	var none *idem.Decisions
	if none.Verdict() != idem.Undecided || none.Replayed() {
		t.Fatal("a nil cell is undecided")
	}
}
