package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/idemgen/idemgen/runtime/idem"
	"sync"
)

// findings is what the probes observed on one peer.
type findings struct {
	// mismatch: the same order ID again with another amount.
	mismatchErr      error
	mismatchReplayed bool // the call returned the first call's receipt
	// missing: two calls with an empty order ID.
	missingErr  error
	missingRuns int64
	// duplicates: dup concurrent calls with one new order ID, trials times.
	trials, dup    int
	dupRuns, dupOK int64
	dupErrs        []error
}

// probe checks, on p: a retry with another payload, calls without a key,
// and concurrent duplicates of one key.
func probe(ctx context.Context, p *peer, trials, dup int) (findings, error) {
	var f findings
	o := newOrder()
	if _, err := p.place(ctx, o); err != nil {
		return f, fmt.Errorf("%s: %w", p.name, err)
	}
	other := *o
	other.Amount = 999999
	r, err := p.place(ctx, &other)
	f.mismatchErr = err
	f.mismatchReplayed = err == nil && same(r, o) == nil

	before := p.table.Runs.Load()
	for range 2 {
		noKey := newOrder()
		noKey.ID = ""
		if _, err := p.place(ctx, noKey); err != nil {
			f.missingErr = err
		}
	}
	f.missingRuns = p.table.Runs.Load() - before

	f.trials, f.dup = trials, dup
	before = p.table.Runs.Load()
	var mu sync.Mutex
	for range trials {
		o := newOrder()
		var wg sync.WaitGroup
		for range dup {
			wg.Go(func() {
				r, err := p.place(ctx, o)
				if err == nil {
					err = same(r, o)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					f.dupErrs = append(f.dupErrs, err)
				} else {
					f.dupOK++
				}
			})
		}
		wg.Wait()
	}
	f.dupRuns = p.table.Runs.Load() - before
	return f, nil
}

func (f findings) mismatch() string {
	switch {
	case errors.Is(f.mismatchErr, idem.ErrPayloadMismatch):
		return "refused: idem.ErrPayloadMismatch"
	case f.mismatchReplayed:
		return "returns the first call's receipt (input not compared)"
	case f.mismatchErr != nil:
		return "error: " + f.mismatchErr.Error()
	}
	return "returns another receipt"
}

func (f findings) missing() string {
	switch {
	case errors.Is(f.missingErr, idem.ErrMissingKey) && f.missingRuns == 0:
		return "refused: idem.ErrMissingKey"
	case f.missingErr == nil && f.missingRuns == 2:
		return "runs every call (a random workflow ID): 2 executions for 2 calls"
	case f.missingErr != nil:
		return fmt.Sprintf("%d executions for 2 calls, error: %v", f.missingRuns, f.missingErr)
	}
	return fmt.Sprintf("%d executions for 2 calls", f.missingRuns)
}

func (f findings) duplicates() string {
	s := fmt.Sprintf("%d executions for %d keys; %d of %d calls got the receipt", f.dupRuns, f.trials, f.dupOK, f.trials*f.dup)
	if len(f.dupErrs) > 0 {
		s += fmt.Sprintf(" (first error: %v)", f.dupErrs[0])
	}
	return s
}
