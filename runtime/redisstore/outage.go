package redisstore

import (
	"errors"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
)

// passing reports whether err is an answer of Redis (or of go-redis about
// the connection) that can pass, so that the store marks it with
// idem.StoreOutage: the executor then keeps trying a Complete or a Release
// instead of taking it for a refusal (see idem.ErrStoreOutage). They are
// what a client meets while a master fails over, a server restarts or is
// overloaded: READONLY (a replica, or a demoted master), LOADING,
// MASTERDOWN, TRYAGAIN, CLUSTERDOWN, BUSY (a script still running), max
// number of clients reached, NOREPLICAS, a connection pool timeout, and
// network errors (a refused dial, a lost connection).
//
// An OOM answer (maxmemory reached under noeviction) is a full store, which
// the store reports as idem.ErrStoreFull, not as an outage: it passes only
// as keys expire, and is refused at once.
func passing(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		if redis.HasErrorPrefix(err, "BUSY") {
			return true
		}
		return redis.IsReadOnlyError(err) || redis.IsLoadingError(err) || redis.IsMasterDownError(err) ||
			redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || redis.IsMaxClientsError(err) ||
			redis.IsNoReplicasError(err)
	}
	var ne net.Error
	return errors.Is(err, redis.ErrPoolTimeout) || errors.As(err, &ne)
}

// outage marks err with idem.StoreOutage when it can pass (see passing).
func outage(err error) error {
	if passing(err) {
		return idem.StoreOutage(err)
	}
	return err
}
