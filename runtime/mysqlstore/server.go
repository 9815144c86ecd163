package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/runtime/idem"
)

// What the store learns of its server once (issue 34): the packet limit an
// outcome must fit in, and whether the pool's sessions read uncommitted
// rows. Both are read by the first call of a store, with its statements
// prepared, before that call holds any connection (warm), so that no call
// ever needs a second connection of the pool while it holds one.

// packetMargin is what a Complete statement sends besides the outcome's
// bytes (its other arguments, their lengths and types, the packet's
// header), rounded up generously: an outcome fits when its length plus
// packetMargin is at most the server's max_allowed_packet.
const packetMargin = 4 << 10

// serverInfo is what warm read of the server.
type serverInfo struct {
	maxPacket int64 // @@max_allowed_packet, in bytes
	dirty     bool  // the pool's sessions run at READ UNCOMMITTED
}

// querier runs a query on the database, a connection or a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readServer reads max_allowed_packet and the session's isolation level on
// q. The isolation variable is transaction_isolation on MySQL 8.0 and
// MariaDB 11.1 and later, tx_isolation on MariaDB before 11.1.
func readServer(ctx context.Context, q querier) (serverInfo, error) {
	var info serverInfo
	var iso string
	err := q.QueryRowContext(ctx, "SELECT @@max_allowed_packet, @@transaction_isolation").Scan(&info.maxPacket, &iso)
	if errNumber(err) == errUnknownSysVar {
		err = q.QueryRowContext(ctx, "SELECT @@max_allowed_packet, @@tx_isolation").Scan(&info.maxPacket, &iso)
	}
	if err != nil {
		return serverInfo{}, err
	}
	info.dirty = strings.EqualFold(strings.ReplaceAll(iso, " ", "-"), "READ-UNCOMMITTED")
	return info, nil
}

// warm prepares every statement of the store on the pool and reads the
// server's settings, once per store (again after a failure, or after a
// statement was dropped: see drop). It is called at the start of each
// call, before the call takes a connection of its own: a statement
// prepared on the pool is then prepared on a call's own connection by
// (*sql.Tx).StmtContext without a second one, and a pool of one
// connection serves every call.
func (s *Store) warm(ctx context.Context) error {
	if s.warmed.Load() {
		return nil
	}
	s.warmMu.Lock()
	defer s.warmMu.Unlock()
	if s.warmed.Load() {
		return nil
	}
	for _, q := range s.q.prepared() {
		if _, err := s.prep(ctx, q); err != nil {
			return err
		}
	}
	if s.info.Load() == nil {
		info, err := readServer(ctx, s.db)
		if err != nil {
			return err
		}
		s.info.Store(&info)
	}
	s.warmed.Store(true)
	return nil
}

// server returns what warm read (reading it again on q, a connection the
// caller holds, when a failure made the store forget it).
func (s *Store) server(ctx context.Context, q querier) (serverInfo, error) {
	if info := s.info.Load(); info != nil {
		return *info, nil
	}
	info, err := readServer(ctx, q)
	if err != nil {
		return serverInfo{}, err
	}
	s.info.Store(&info)
	return info, nil
}

// fits refuses, before anything is sent, an outcome the server would
// refuse: longer than its max_allowed_packet less packetMargin. A refused
// Complete would otherwise fail on the server (error 1105 for a parameter
// sent as long data, 1153 and a closed connection for a packet), and the
// executor would retry it until the lease ended: a second run. The error
// wraps idem.ErrTooLarge: the executor stores its small "outcome not
// stored" substitute instead, at once.
func (s *Store) fits(ctx context.Context, q querier, key idem.Key, out idem.Outcome) error {
	n := int64(outcomeLen(out))
	if n+packetMargin <= minPacket {
		return nil // fits any server: no need to know this one's limit
	}
	info, err := s.server(ctx, q)
	if err != nil {
		return fail("complete", key, err)
	}
	if n+packetMargin > info.maxPacket {
		return fail("complete", key, fmt.Errorf("outcome of %d bytes, more than the server's max_allowed_packet (%d bytes) allows: %w",
			n, info.maxPacket, idem.ErrTooLarge))
	}
	return nil
}

// minPacket is the smallest max_allowed_packet a server accepts (1 KiB):
// an outcome that fits under it fits every server, and needs no look at
// the server's setting.
const minPacket = 1 << 10

// MySQL and MariaDB errors of a statement too large for the server.
const (
	errUnknown          = 1105 // ER_UNKNOWN_ERROR: a long-data parameter over max_allowed_packet
	errNetPacketTooBig  = 1153 // ER_NET_PACKET_TOO_LARGE
	errPacketOverflowed = 1301 // ER_WARN_ALLOWED_PACKET_OVERFLOWED
	errUnknownSysVar    = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE
)

// tooLarge reports an error that says the statement was larger than the
// server (or the driver's packet limit) takes.
func tooLarge(err error) bool {
	if errors.Is(err, mysql.ErrPktTooLarge) {
		return true
	}
	switch errNumber(err) {
	case errNetPacketTooBig, errPacketOverflowed:
		return true
	case errUnknown:
		return strings.Contains(err.Error(), "max_allowed_packet")
	}
	return false
}

// drop forgets the prepared statement q after a failure of a statement that
// carried an outcome: the driver leaves a server-side statement whose long
// data the server refused in a state that fails every later execution
// (go-sql-driver/mysql issue 307; v1.10.2 resets it only when the client's
// write fails, not when the server refuses the data), so the statement is
// closed on every connection and prepared afresh. What the store read of
// the server is forgotten too: a packet refused although it fit means the
// limit changed. The next call prepares and reads again in warm.
func (s *Store) drop(q string) {
	s.info.Store(nil)
	if st, ok := s.stmts.LoadAndDelete(q); ok {
		_ = st.(*sql.Stmt).Close()
	}
	s.warmed.Store(false)
}

// stmtClosed reports database/sql's error for a statement closed by drop
// while another call was about to run it.
func stmtClosed(err error) bool {
	return err != nil && err.Error() == "sql: statement is closed"
}
