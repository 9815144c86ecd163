package mysqlstore

import (
	"context"
	"errors"
)

// ErrGalera is the error of TxStore.ClaimTx on a MariaDB Galera cluster
// (the server's wsrep_on is ON). Transactional mode serializes the claims
// of a key with user-level locks (GET_LOCK), and Galera does not replicate
// them: two nodes grant the same lock at once, so two callers of one key on
// two nodes run the method at the same time, and certification rolls one
// of them back only at commit, after its effects outside the database
// happened (measured: docs/FAILOVER.md). Use lease mode (New) on Galera,
// with wsrep_sync_wait=15 in the DSN so that every statement sees the
// writes other nodes committed before it.
var ErrGalera = errors.New("mysqlstore: transactional mode refuses a Galera cluster (wsrep_on is ON): " +
	"GET_LOCK is not replicated across its nodes, so two nodes would run one key's method at once; " +
	"use lease mode (mysqlstore.New) with wsrep_sync_wait=15 in the DSN")

// errUnknownSystemVariable is MySQL's answer to @@wsrep_on: no Galera.
const errUnknownSystemVariable = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE

// Values of TxStore.wsrep.
const (
	wsrepUnknown int32 = iota
	wsrepOff
	wsrepOn
)

// refuseGalera answers ErrGalera when the server is a Galera node, asking
// it once per store (@@GLOBAL.wsrep_on; MySQL, which has no such variable,
// is no Galera node). A failed look is returned as is and asked again on
// the next claim.
func (s *TxStore) refuseGalera(ctx context.Context) error {
	switch s.wsrep.Load() {
	case wsrepOff:
		return nil
	case wsrepOn:
		return ErrGalera
	}
	var on int64
	err := s.db.QueryRowContext(ctx, "SELECT @@GLOBAL.wsrep_on").Scan(&on)
	switch {
	case errNumber(err) == errUnknownSystemVariable:
		on = 0
	case err != nil:
		return err
	}
	if on != 0 {
		s.wsrep.Store(wsrepOn)
		return ErrGalera
	}
	s.wsrep.Store(wsrepOff)
	return nil
}
