package pgstore

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgen/idemgen/runtime/idem"
)

// A claim's reply is read on every call: a cold replay (a retry that
// reaches a process whose store never saw the key final) reads the record
// from probe (transactional) or the fast claim statement (lease mode).
// pgx's Rows.Scan finds a scan plan per column and, for the nullable
// columns, allocates the pointers it scans into; the columns of these
// statements have fixed types, which the server sends in binary format
// when the statement is prepared (pgx's default QueryExecModeCacheStatement
// asks binary results for these types). The readers below decode such a
// row from Rows.RawValues: the copies of the body, the meta and the error
// are the only allocations. A row in text format (a pool in another
// QueryExecMode) or of other column types is read by Rows.Scan, as before
// (TestRawRowMatchesScan compares the two).

// rawKind is the expected type of a column of a row read raw.
type rawKind uint8

const (
	rawBool     rawKind = iota + 1 // bool
	rawInt2                        // smallint
	rawInt4                        // int
	rawInt8                        // bigint
	rawBytea                       // bytea
	rawInterval                    // interval
)

// oid is the PostgreSQL type of k.
func (k rawKind) oid() uint32 {
	switch k {
	case rawBool:
		return pgtype.BoolOID
	case rawInt2:
		return pgtype.Int2OID
	case rawInt4:
		return pgtype.Int4OID
	case rawInt8:
		return pgtype.Int8OID
	case rawBytea:
		return pgtype.ByteaOID
	case rawInterval:
		return pgtype.IntervalOID
	}
	return 0
}

// rawValues returns the current row's values when rows has exactly the
// columns kinds, each in binary format; ok is false otherwise (the caller
// scans).
func rawValues(rows pgx.Rows, kinds []rawKind) (vals [][]byte, ok bool) {
	fds := rows.FieldDescriptions()
	if len(fds) != len(kinds) {
		return nil, false
	}
	for i, fd := range fds {
		if fd.Format != pgx.BinaryFormatCode || fd.DataTypeOID != kinds[i].oid() {
			return nil, false
		}
	}
	vals = rows.RawValues()
	if len(vals) != len(kinds) {
		return nil, false
	}
	for i, v := range vals {
		if v != nil && !rawSizeOK(kinds[i], len(v)) {
			return nil, false
		}
	}
	return vals, true
}

func rawSizeOK(k rawKind, n int) bool {
	switch k {
	case rawBool:
		return n == 1
	case rawInt2:
		return n == 2
	case rawInt4:
		return n == 4
	case rawInt8:
		return n == 8
	case rawInterval:
		return n == 16
	}
	return true
}

var errRawNull = errors.New("a column that cannot be NULL was NULL")

func rawInt16(v []byte) int16 { return int16(binary.BigEndian.Uint16(v)) }
func rawInt32(v []byte) int32 { return int32(binary.BigEndian.Uint32(v)) }
func rawInt64(v []byte) int64 { return int64(binary.BigEndian.Uint64(v)) }

// rawBytes copies a bytea value: nil for NULL, as Rows.Scan into a []byte.
func rawBytes(v []byte) []byte {
	if v == nil {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}

// rawIntervalDuration decodes an interval's microseconds and days (months
// are not used by the claim statements' lease_left).
func rawIntervalDuration(v []byte) time.Duration {
	micros := int64(binary.BigEndian.Uint64(v[:8]))
	days := int32(binary.BigEndian.Uint32(v[8:12]))
	return time.Duration(micros)*time.Microsecond + time.Duration(days)*24*time.Hour
}

// rawRecord builds a record from the raw values of status, fingerprint,
// scheme, token, body, err_code, err_message and meta, as record does from
// scanned ones; status, scheme and token must not be NULL.
func rawRecord(status, fp, scheme, token, body, code, msg, meta []byte) (idem.Record, error) {
	if status == nil || scheme == nil || token == nil {
		return idem.Record{}, errRawNull
	}
	return record(rawInt16(status), fp, rawInt32(scheme), rawInt64(token),
		idem.Outcome{Body: rawBytes(body), Meta: rawBytes(meta)}, code, msg), nil
}

// probeKinds are probe's columns (see probeSQL).
var probeKinds = []rawKind{rawInt2, rawBytea, rawInt4, rawInt8, rawBytea, rawBytea, rawBytea, rawBytea, rawInt2}

// finalKinds are finalSQL's columns.
var finalKinds = []rawKind{rawInt2, rawBytea, rawInt4, rawInt8, rawBytea, rawBytea, rawBytea, rawBytea}

// claimKinds are the claim statements' eleven columns (see scanClaimRow),
// then one extra: slow (the fast claim's, bool) or busy (decide's,
// smallint).
var (
	claimKinds     = []rawKind{rawBool, rawBool, rawInt2, rawBytea, rawInt4, rawInt8, rawInterval, rawBytea, rawBytea, rawBytea, rawBytea}
	claimSlowKinds = append(claimKinds[:len(claimKinds):len(claimKinds)], rawBool)
	claimBusyKinds = append(claimKinds[:len(claimKinds):len(claimKinds)], rawInt2)
)

// rawClaimRow decodes a claim statement's row (claimKinds): the claim and,
// in a record's place, its lease left when PROCESSING.
func rawClaimRow(v [][]byte) (idem.Claim, error) {
	if v[0] == nil || v[1] == nil {
		return idem.Claim{}, errRawNull
	}
	c := idem.Claim{Claimed: v[0][0] != 0, TakenOver: v[1][0] != 0}
	if c.Claimed {
		return c, nil
	}
	rec, err := rawRecord(v[2], v[3], v[4], v[5], v[7], v[8], v[9], v[10])
	if err != nil {
		return idem.Claim{}, err
	}
	c.Record = rec
	if c.Record.Status == idem.StatusProcessing && v[6] != nil {
		c.Record.LeaseLeft = max(rawIntervalDuration(v[6]), 0)
	}
	return c, nil
}
