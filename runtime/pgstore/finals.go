package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// finalSlots is the size of a store's finals: 8,192 keys, 64 KiB.
const finalSlots = 1 << 13

// finals remembers, for a bounded number of keys, that this store last saw
// the key's record final (it stored the outcome, or a claim answered with
// it). It is a hint that picks a claim's plan, never its answer: a claim
// of a key it names first reads the record with one plain SELECT (the
// replay a retry nearly always is), and only when that finds no live final
// record does it forget the key and claim as any other call, in a second
// round trip. A wrong hint (the record expired, was forgotten by an
// operator or swept) thus costs one round trip and is then gone; it never
// changes what the claim answers, since both plans answer from the
// database.
//
// It is a table of fixed size, allocated on the first hint, of two-slot
// buckets: a slot holds a 64-bit tag of a key hinted there, or 0. A key's
// bucket is chosen by the first 8 bytes of its ID (a SHA-256 that covers
// tenant and operation) and its tag is the next 8: a third key of a bucket
// evicts one of the two (chosen by its tag), and a tag matches another key
// with probability 2⁻⁶³, which would cost that key's first call a round
// trip. Memory does not grow with keys, tenants or traffic. A store that
// never stores or replays an outcome (an operator's tool) allocates none.
type finals struct {
	on    bool // a plain-table store's; a partitioned one keeps no hints
	table atomic.Pointer[[finalSlots]atomic.Uint64]
}

func newFinals() finals { return finals{on: true} }

// bucket returns k's two slots in t and its tag (never 0).
func bucket(t *[finalSlots]atomic.Uint64, k idem.Key) (*[2]atomic.Uint64, uint64) {
	i := binary.BigEndian.Uint64(k.ID[:8]) % (finalSlots / 2) * 2
	return (*[2]atomic.Uint64)(t[i : i+2]), binary.BigEndian.Uint64(k.ID[8:16]) | 1
}

// has reports whether k is hinted final.
func (f *finals) has(k idem.Key) bool {
	t := f.table.Load()
	if t == nil {
		return false
	}
	b, tag := bucket(t, k)
	return b[0].Load() == tag || b[1].Load() == tag
}

// add hints that k's record is final: in an empty slot of its bucket if
// there is one, else in the slot its tag picks.
func (f *finals) add(k idem.Key) {
	if !f.on {
		return
	}
	t := f.table.Load()
	if t == nil {
		f.table.CompareAndSwap(nil, new([finalSlots]atomic.Uint64))
		t = f.table.Load()
	}
	b, tag := bucket(t, k)
	x, y := b[0].Load(), b[1].Load()
	switch {
	case x == tag || y == tag:
	case x == 0:
		b[0].CompareAndSwap(0, tag)
	case y == 0:
		b[1].CompareAndSwap(0, tag)
	default:
		b[tag>>63].Store(tag)
	}
}

// forget drops k's hint, if its bucket still holds it.
func (f *finals) forget(k idem.Key) {
	t := f.table.Load()
	if t == nil {
		return
	}
	b, tag := bucket(t, k)
	b[0].CompareAndSwap(tag, 0)
	b[1].CompareAndSwap(tag, 0)
}

// noteClaim records what a claim answered: a final record is hinted.
func (f *finals) noteClaim(k idem.Key, c idem.Claim) {
	if st := c.Record.Status; !c.Claimed && (st == idem.StatusSucceeded || st == idem.StatusFailedFinal) {
		f.add(k)
	}
}

// finalSQL is the statement of a hinted claim: the key's live final
// record, if any (see scanFinal).
func finalSQL(t string) string {
	return fmt.Sprintf(`SELECT c.status, c.fingerprint, c.scheme, c.token, c.body, c.err_code, c.err_message, c.meta
FROM %s c
WHERE c.key = $1::bytea AND c.status <> 1 AND c.expires_at > %s`, t, ts)
}

// scanFinal reads finalSQL's reply: ok is false when it has no row.
func scanFinal(rows pgx.Rows) (c idem.Claim, ok bool, err error) {
	defer rows.Close()
	if !rows.Next() {
		return c, false, rows.Err()
	}
	if v, ok := rawValues(rows, finalKinds); ok {
		if c.Record, err = rawRecord(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]); err != nil {
			return idem.Claim{}, false, err
		}
	} else if c.Record, err = scanFinalColumns(rows); err != nil {
		return idem.Claim{}, false, err
	}
	if rows.Next() {
		return c, false, errors.New("the final record's read returned more than one row")
	}
	if err := rows.Err(); err != nil {
		return c, false, err
	}
	return c, true, nil
}

// scanFinalColumns is scanFinal's read of a row that is not decoded raw:
// Rows.Scan.
func scanFinalColumns(rows pgx.Rows) (idem.Record, error) {
	var (
		status    int16
		fp        []byte
		scheme    int32
		token     int64
		code, msg []byte
		out       idem.Outcome
	)
	if err := rows.Scan(&status, &fp, &scheme, &token, &out.Body, &code, &msg, &out.Meta); err != nil {
		return idem.Record{}, err
	}
	return record(status, fp, scheme, token, out, code, msg), nil
}

// querier is what replayHinted needs of a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var _ querier = (*pgxpool.Pool)(nil)

// replayHinted runs a hinted claim's SELECT on db: ok is false when the key
// has no live final record (the hint was wrong and is forgotten), and the
// caller claims as usual. A read changes nothing, so an error is returned
// as it is, with nothing to settle.
func (s *Store) replayHinted(ctx context.Context, db querier, req idem.ClaimRequest) (c idem.Claim, ok bool, err error) {
	rows, err := db.Query(ctx, s.sql.final, req.Key.ID[:])
	if err != nil {
		return idem.Claim{}, false, err
	}
	if c, ok, err = scanFinal(rows); err != nil {
		return idem.Claim{}, false, err
	}
	if !ok {
		s.finals.forget(req.Key)
	}
	return c, ok, nil
}
