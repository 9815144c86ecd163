package redisstore

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestErrorfMarksPassingErrors: errorf marks the answers that can pass
// with idem.ErrStoreOutage, and no refusal.
func TestErrorfMarksPassingErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED), true},
		{&netErr{}, true},
		{redis.ErrPoolTimeout, true},
		{redis.ErrClosed, false},
		{redis.Nil, false},
		{errors.New("ERR unknown command"), false},
	} {
		assert.Equal(t, c.want, errors.Is(errorf("complete", idem.Key{}, c.err), idem.ErrStoreOutage), "%v", c.err)
	}
}

type netErr struct{}

func (*netErr) Error() string   { return "read tcp: connection reset by peer" }
func (*netErr) Timeout() bool   { return false }
func (*netErr) Temporary() bool { return false }
