package pgstore

import (
	"context"
	"time"
)

// CreatePartitions creates the partitions of the store's interval that
// [from, to) overlaps, for tests that move records into the past.
func (s *Store) CreatePartitions(ctx context.Context, from, to time.Time) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := s.createPartitions(ctx, tx, from, to); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// PartitionBounds returns the bounds of the table's partitions, by lower
// bound.
func (s *Store) PartitionBounds(ctx context.Context) ([][2]time.Time, error) {
	ps, err := s.partitions(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	b := make([][2]time.Time, len(ps))
	for i, p := range ps {
		b[i] = [2]time.Time{p.lower, p.upper}
	}
	return b, nil
}
