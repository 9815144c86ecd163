package testenv

import (
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// FillRedis fills the Redis server of c, which must run under maxmemory
// with maxmemory-policy noeviction, until it refuses even a small SET with
// an OOM error: large values first, then small ones (a command is refused
// once the memory in use, its own request buffer included, passes
// maxmemory, so the server is full for small commands only when a small
// SET is refused).
func FillRedis(t testing.TB, c *redis.Client) {
	t.Helper()
	for _, size := range []int{64 << 10, 64} {
		v := strings.Repeat("x", size)
		for i := 0; ; i++ {
			if i == 1_000_000 {
				t.Fatalf("redis at %s never filled up: is maxmemory set?", c.Options().Addr)
			}
			err := c.Set(t.Context(), "filler:"+strconv.Itoa(size)+":"+strconv.Itoa(i), v, 0).Err()
			if err == nil {
				continue
			}
			if !strings.Contains(err.Error(), "OOM") {
				t.Fatalf("filling redis: %v", err)
			}
			break
		}
	}
}
