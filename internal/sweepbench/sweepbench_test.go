package sweepbench_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/sweepbench"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func TestParsePacing(t *testing.T) {
	ps, err := sweepbench.ParsePacing(sweepbench.DefaultPacing + ",250:0.1:5ms")
	require.NoError(t, err)
	assert.Equal(t, []sweepbench.Pacing{{Batch: 1000, Duty: 0.05}, {Batch: 250, Duty: 0.1, Pause: 5 * time.Millisecond}}, ps)
	assert.Equal(t, "250:0.1:5ms", ps[1].String())
	for _, bad := range []string{"", "1000:0.05", "0:0.05:0s", "x:0.05:0s", "1000:0:0s", "1000:1.5:0s", "1000:NaN:0s", "1000:0.05:-1s"} {
		_, err := sweepbench.ParsePacing(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// TestExpiries: both kinds of expiry remove every expired record of a
// store (memstore, whose sweep is cheap enough for a pacing of 1).
func TestExpiries(t *testing.T) {
	ctx := context.Background()
	p50, p99 := sweepbench.Percentiles(nil)
	assert.Zero(t, p50+p99)
	p50, p99 = sweepbench.Percentiles([]time.Duration{3, 1, 2})
	assert.Equal(t, time.Duration(2), p50)
	assert.Equal(t, time.Duration(3), p99)
	for name, expire := range map[string]func(*memstore.Store) (int, error){
		"loop": func(s *memstore.Store) (int, error) { return sweepbench.Loop(ctx, s, 10) },
		"paced": func(s *memstore.Store) (int, error) {
			return sweepbench.Paced(ctx, sweepbench.Pacing{Batch: 10, Duty: 1}, s)
		},
	} {
		t.Run(name, func(t *testing.T) {
			now := time.Unix(1e9, 0)
			s := memstore.New(memstore.WithClock(func() time.Time { return now }))
			for i := range 35 {
				k, err := idem.NewKey("t", "op", strconv.Itoa(i))
				require.NoError(t, err)
				c, err := s.Claim(ctx, idem.ClaimRequest{Key: k, Token: 1, Lease: time.Minute, TTL: time.Minute})
				require.NoError(t, err)
				require.True(t, c.Claimed)
			}
			now = now.Add(time.Hour)
			n, err := expire(s)
			require.NoError(t, err)
			assert.Equal(t, 35, n)
		})
	}
}
