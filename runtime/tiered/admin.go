package tiered

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The operators' capability, idem.AdminStore: the durable store's records
// are the truth, so Lookup, List and Stats are its own; Forget forgets the
// durable record, then the fast store's copy of that version.

// durableAdmin returns the durable store as an idem.AdminStore.
func (s *Store) durableAdmin() (idem.AdminStore, error) {
	a, ok := s.durable.(idem.AdminStore)
	if !ok {
		return nil, fmt.Errorf("durable store %T: %w", s.durable, errors.ErrUnsupported)
	}
	return a, nil
}

// Lookup implements idem.AdminStore: the durable store's record.
func (s *Store) Lookup(ctx context.Context, key idem.Key) (idem.Entry, error) {
	a, err := s.durableAdmin()
	if err != nil {
		return idem.Entry{}, errorf("lookup", key, err)
	}
	e, err := a.Lookup(ctx, key)
	if err != nil {
		return idem.Entry{}, errorf("lookup", key, err)
	}
	return e, nil
}

// List implements idem.AdminStore: the durable store's records.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.Page, error) {
	a, err := s.durableAdmin()
	if err != nil {
		return idem.Page{}, fmt.Errorf("tiered: list: %w", err)
	}
	p, err := a.List(ctx, q)
	if err != nil {
		return idem.Page{}, fmt.Errorf("tiered: list: %w", err)
	}
	return p, nil
}

// Stats implements idem.AdminStore: the durable store's counts.
func (s *Store) Stats(ctx context.Context, q idem.StatsQuery) ([]idem.Stat, error) {
	a, err := s.durableAdmin()
	if err != nil {
		return nil, fmt.Errorf("tiered: stats: %w", err)
	}
	st, err := a.Stats(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("tiered: stats: %w", err)
	}
	return st, nil
}

// Forget implements idem.AdminStore: it forgets the durable record (fenced
// there), then the fast store's copy if it holds the same token (a final
// copy would otherwise go on replaying the forgotten outcome, and refuse
// the outcome of the next run). When the durable record is already gone
// (ErrNotFound), the fast copy of req's token is forgotten all the same,
// so that a Forget that failed half-way can be repeated. A fast store
// that could not be cleaned is an error naming it: the durable record is
// forgotten, but retries may be replayed from the fast copy until its TTL.
func (s *Store) Forget(ctx context.Context, req idem.ForgetRequest) error {
	a, err := s.durableAdmin()
	if err != nil {
		return errorf("forget", req.Key, err)
	}
	derr := a.Forget(ctx, req)
	if derr != nil && !errors.Is(derr, idem.ErrNotFound) {
		return errorf("forget", req.Key, derr)
	}
	if ferr := s.forgetFast(ctx, req); ferr != nil {
		if derr != nil {
			return errorf("forget", req.Key, errors.Join(derr, ferr))
		}
		return errorf("forget", req.Key, fmt.Errorf("the durable record is forgotten, the fast store's copy is not (forget again): %w", ferr))
	}
	if derr != nil {
		return errorf("forget", req.Key, derr)
	}
	return nil
}

// forgetFast forgets the fast store's record of req.Token, whatever its
// status.
func (s *Store) forgetFast(ctx context.Context, req idem.ForgetRequest) error {
	fa, ok := s.fast.(idem.AdminStore)
	if !ok {
		return nil // a fast store operators cannot reach holds no copy they could clean
	}
	e, err := fa.Lookup(ctx, req.Key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return nil
	case err != nil:
		return err
	case e.Token != req.Token:
		return nil // another claim's record: not the version forgotten
	}
	fr := req
	fr.Status, fr.Force = e.Status, true
	if err := fa.Forget(ctx, fr); err != nil && !errors.Is(err, idem.ErrNotFound) && !errors.Is(err, idem.ErrRecordChanged) {
		return err
	}
	return nil
}

var _ idem.AdminStore = (*Store)(nil)
