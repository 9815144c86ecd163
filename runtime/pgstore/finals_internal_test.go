package pgstore

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestFinalsSlots: two keys of a bucket are both hinted; a third evicts the
// one in the slot its tag picks, never both; forgetting a key leaves the
// others' hints; a key whose tag bytes are all zero is hinted too (0 marks
// an empty slot); only a final record is a hint; the table is allocated on
// the first hint; a partitioned store keeps none.
func TestFinalsSlots(t *testing.T) {
	withID := func(bucket, tag byte, high bool) idem.Key {
		var k idem.Key
		k.ID[7], k.ID[15] = bucket*2, tag // buckets are of two slots
		if high {
			k.ID[8] = 0x80
		}
		return k
	}
	f := newFinals()
	a, b, c := withID(1, 2, false), withID(1, 4, false), withID(1, 6, true)
	zero, elsewhere := withID(2, 0, false), withID(3, 2, false)
	f.add(a)
	assert.True(t, f.has(a))
	assert.False(t, f.has(b), "another key of the bucket")
	assert.False(t, f.has(elsewhere), "the same tag in another bucket")
	f.add(b)
	assert.True(t, f.has(a) && f.has(b), "two keys of a bucket")
	f.add(c)
	assert.True(t, f.has(c))
	assert.True(t, f.has(a) != f.has(b), "the third key evicts one of the two")
	f.forget(a)
	f.forget(b)
	assert.True(t, f.has(c), "forgetting others leaves c's hint")
	f.add(zero)
	assert.True(t, f.has(zero))
	f.forget(zero)
	assert.False(t, f.has(zero))
	f.noteClaim(a, idem.Claim{Record: idem.Record{Status: idem.StatusProcessing}})
	assert.False(t, f.has(a), "a PROCESSING record is no hint")
	f.noteClaim(a, idem.Claim{Record: idem.Record{Status: idem.StatusFailedFinal}})
	assert.True(t, f.has(a), "a final error is final")
	f.noteClaim(b, idem.Claim{Claimed: true})
	assert.False(t, f.has(b), "a claim is no hint")

	unused := newFinals()
	assert.False(t, unused.has(a))
	unused.forget(a)
	assert.Nil(t, unused.table.Load(), "no table until the first hint")

	var none finals // a partitioned store's
	none.add(a)
	assert.False(t, none.has(a))
	none.forget(a)
}
