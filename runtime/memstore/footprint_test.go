package memstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestFootprintReturnsToBaseline: the state the store derives from its
// callers' tenants and operations (the interned names, the tenants'
// counters) lives only as long as a record that needs it. For every way a
// record leaves the store, claims under ever-new tenants and operations,
// then their removal, leave the store as it was: no record, no byte, no
// name, no counter. Before the fix the names and counters stayed for the
// store's life, outside its bounds: a client sending fresh tenant names
// grew the process without limit.
func TestFootprintReturnsToBaseline(t *testing.T) {
	const ttl = time.Minute
	complete := func(t *testing.T, s *memstore.Store, r idem.ClaimRequest) {
		require.NoError(t, s.Complete(t.Context(), r.Key, r.Token, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("ok")}, ttl))
	}
	cases := []struct {
		name string
		// hold runs after each claim (nil: the record stays PROCESSING).
		hold func(*testing.T, *memstore.Store, idem.ClaimRequest)
		// drop removes every record claimed, after the clock moved by ttl
		// when expire is set.
		drop   func(*testing.T, *memstore.Store, []idem.ClaimRequest)
		expire bool
	}{
		{name: "release", drop: func(t *testing.T, s *memstore.Store, rs []idem.ClaimRequest) {
			for _, r := range rs {
				require.NoError(t, s.Release(t.Context(), r.Key, r.Token))
			}
		}},
		{name: "forget", hold: complete, drop: func(t *testing.T, s *memstore.Store, rs []idem.ClaimRequest) {
			for _, r := range rs {
				require.NoError(t, s.Forget(t.Context(), idem.ForgetRequest{Key: r.Key, Token: r.Token, Status: idem.StatusSucceeded}))
			}
		}},
		{name: "complete then sweep all", hold: complete, expire: true, drop: func(t *testing.T, s *memstore.Store, rs []idem.ClaimRequest) {
			n, err := s.Sweep(t.Context(), 0)
			require.NoError(t, err)
			require.Equal(t, len(rs), n)
		}},
		{name: "processing then bounded sweeps", expire: true, drop: func(t *testing.T, s *memstore.Store, rs []idem.ClaimRequest) {
			for {
				n, err := s.Sweep(t.Context(), 7)
				require.NoError(t, err)
				if n < 7 {
					break
				}
			}
		}},
		{name: "expired found by lookup", hold: complete, expire: true, drop: func(t *testing.T, s *memstore.Store, rs []idem.ClaimRequest) {
			for _, r := range rs {
				_, err := s.Lookup(t.Context(), r.Key)
				require.ErrorIs(t, err, idem.ErrNotFound)
			}
		}},
		{name: "expired taken by a release", expire: true, drop: func(t *testing.T, s *memstore.Store, rs []idem.ClaimRequest) {
			for _, r := range rs {
				require.NoError(t, s.Release(t.Context(), r.Key, r.Token))
			}
		}},
		{name: "seeded then expired", hold: func(t *testing.T, s *memstore.Store, r idem.ClaimRequest) {
			// Seed replaces the PROCESSING record by a completed one.
			require.NoError(t, s.Seed(t.Context(), r.Key, idem.Record{Status: idem.StatusSucceeded, Token: r.Token,
				Outcome: idem.Outcome{Status: idem.StatusSucceeded, Meta: []byte("m")}}, ttl))
		}, expire: true, drop: func(t *testing.T, s *memstore.Store, rs []idem.ClaimRequest) {
			_, err := s.Sweep(t.Context(), 0)
			require.NoError(t, err)
		}},
	}
	for _, tc := range cases {
		for _, shape := range []struct {
			name      string
			tenant    func(i int) string
			op        func(i int) string
			withShare bool
		}{
			{"new tenant each", func(i int) string { return "tenant-" + strconv.Itoa(i) }, func(int) string { return "Svc.M" }, true},
			{"new op each", func(int) string { return "t" }, func(i int) string { return "Svc.M" + strconv.Itoa(i) }, true},
			{"new both, no share", func(i int) string { return strings.Repeat("x", i%100) + strconv.Itoa(i) }, func(i int) string { return "op/" + strconv.Itoa(i) }, false},
			{"single key space", func(int) string { return "" }, func(i int) string { return "op" + strconv.Itoa(i) }, true},
		} {
			t.Run(tc.name+"/"+shape.name, func(t *testing.T) {
				clock := &fakeClock{now: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
				opts := []memstore.Option{memstore.WithClock(clock.Now)}
				if !shape.withShare {
					opts = append(opts, memstore.WithTenantShare(0))
				}
				s := memstore.New(opts...)
				names0, tenants0 := memstore.Footprint(s)
				const n = 500
				var rs []idem.ClaimRequest
				for i := range n {
					k, err := idem.NewKey(shape.tenant(i), shape.op(i), "k", strconv.Itoa(i))
					require.NoError(t, err)
					r := idem.ClaimRequest{Key: k, Token: idem.Token(i + 1), Lease: ttl, TTL: ttl}
					c, err := s.Claim(t.Context(), r)
					require.NoError(t, err)
					require.True(t, c.Claimed)
					if tc.hold != nil {
						tc.hold(t, s, r)
					}
					rs = append(rs, r)
				}
				names, _ := memstore.Footprint(s)
				require.Positive(t, names, "the records' names are interned")
				if tc.expire {
					clock.Advance(ttl)
				}
				tc.drop(t, s, rs)
				assert.Zero(t, s.Len())
				assert.Zero(t, s.Bytes(), "nothing held, nothing counted")
				names, tenants := memstore.Footprint(s)
				assert.Equal(t, names0, names, "interned names outlive their records")
				assert.Equal(t, tenants0, tenants, "tenant counters outlive their records")
				for i := range 3 {
					assert.Zero(t, s.TenantLen(shape.tenant(i)))
				}
			})
		}
	}
}

// TestNamesCountAgainstMaxBytes: the names a record brings count against
// WithMaxBytes, so that claims under long, ever-new tenants and operations
// are refused when their names, not only their records, fill the bound,
// and the store's size never passes it.
func TestNamesCountAgainstMaxBytes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tenantLen int
		opLen     int
		share     bool
	}{
		{"short names", 1, 1, true},
		{"long tenants", idem.MaxTenantLen - 10, 4, true},
		{"long ops", 1, idem.MaxOpLen - 10, false},
		{"long both", idem.MaxTenantLen - 10, idem.MaxOpLen - 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const maxBytes = 64 * memstore.RecordOverhead
			opts := []memstore.Option{memstore.WithMaxBytes(maxBytes)}
			if !tc.share {
				opts = append(opts, memstore.WithTenantShare(0))
			}
			s := memstore.New(opts...)
			admitted := 0
			for i := range 200 {
				id := strconv.Itoa(i)
				k, err := idem.NewKey(id+strings.Repeat("t", tc.tenantLen), id+strings.Repeat("o", tc.opLen), "k")
				require.NoError(t, err)
				_, err = s.Claim(t.Context(), idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Minute})
				if err == nil {
					admitted++
				} else {
					require.ErrorIs(t, err, idem.ErrStoreFull)
				}
				require.LessOrEqual(t, s.Bytes(), int64(maxBytes), "the store's size passed its bound")
			}
			require.Positive(t, admitted)
			per := int64(memstore.RecordOverhead + tc.tenantLen + tc.opLen)
			assert.LessOrEqual(t, int64(admitted), maxBytes/per, "records with their names fit the bound")
			if tc.tenantLen+tc.opLen > 1000 {
				assert.Less(t, admitted, 64, "long names take room")
			}
		})
	}
}

// TestFootprintRace: claims and releases of a few tenants from many
// goroutines keep each tenant's count exact while its counter is retired
// and made again (the share holds, and every count returns to zero).
func TestFootprintRace(t *testing.T) {
	const share, goroutines, rounds = 3, 8, 300
	s := memstore.New(memstore.WithTenantShare(share))
	var wg sync.WaitGroup
	var over sync.Map
	for g := range goroutines {
		wg.Go(func() {
			tenant := "t" + strconv.Itoa(g%2)
			for i := range rounds {
				k, err := idem.NewKey(tenant, "op", strconv.Itoa(g), strconv.Itoa(i))
				if err != nil {
					panic(err)
				}
				r := idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Minute}
				if _, err := s.Claim(context.Background(), r); err != nil {
					continue
				}
				if n := s.TenantLen(tenant); n > share {
					over.Store(tenant, n)
				}
				if err := s.Release(context.Background(), r.Key, r.Token); err != nil {
					panic(err)
				}
			}
		})
	}
	wg.Wait()
	over.Range(func(k, v any) bool { t.Errorf("tenant %v held %v records, share %d", k, v, share); return true })
	assert.Zero(t, s.Len())
	assert.Zero(t, s.Bytes())
	names, tenants := memstore.Footprint(s)
	assert.Zero(t, names)
	assert.Zero(t, tenants)
}
