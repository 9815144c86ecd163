package redisstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/internal/lossyproxy/everystep"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// TestLostReplyEveryStep loses the reply of each command of a call in turn
// (the claim's script, the outcome's, a release's, a reconnection's
// handshake), for every way the method ends: no panic, one settled answer
// that is replayed, the method run again only after a call that failed
// (everystep).
func TestLostReplyEveryStep(t *testing.T) {
	prefix := "everystep-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	var ledger everystep.Ledger
	everystep.Run(t, everystep.Store{
		Upstream: testenv.RedisAddr(t),
		Open: func(t *testing.T, addr string) idem.Store {
			c := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = c.Close() })
			return redisstore.New(c, redisstore.WithPrefix(prefix))
		},
		Write:  ledger.Write,
		Rows:   ledger.Rows,
		Layers: true,
	})
}
