package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/idem"
)

// This file is the operators' capability, idem.AdminStore
// (docs/decisions/operator-records.md). A record is found by its key's ID,
// so Lookup and Forget are one script each on the record's key. Records keep
// neither tenant, operation nor creation time (Key.ID covers the first two;
// adding them, or an index, would cost every claim), so List and Stats walk
// the keys with SCAN MATCH <prefix>r{* on every master, ScanCount keys a
// call: they cost O(keys in the database) for a full listing, spread over
// pages, and nothing on the path of a call. A filter by tenant, operation
// or age is answered with errors.ErrUnsupported.

// ScanCount is the COUNT of each SCAN of List and Stats.
const ScanCount = 1000

// inspectScript: KEYS[1] record. Returns false when absent, else {record,
// PTTL ms, the server's TIME}.
var inspectScript = newScript(`
local v = redis.call('GET', KEYS[1])
if not v then
	return false
end
local t = redis.call('TIME')
return {v, redis.call('PTTL', KEYS[1]), t[1], t[2]}
`)

// forgetScript: KEYS[1] record; ARGV token (8 bytes), status digit, force
// ("1"). Returns 1 (forgotten), 0 (absent), 2 (another token or status), 3
// (a PROCESSING record whose lease is live, not forced).
var forgetScript = newScript(`
local h = redis.call('GETRANGE', KEYS[1], 0, 52)
if #h == 0 then
	return 0
end
if #h < 42 or string.sub(h, 34, 41) ~= ARGV[1] or string.sub(h, 1, 1) ~= ARGV[2] then
	return 2
end
if ARGV[2] == '1' and ARGV[3] ~= '1' then
	local j = string.find(h, ':', 42, true)
	local g = j and tonumber(string.sub(redis.call('GET', KEYS[1]), j + 1))
	if not g then
		return redis.error_reply('malformed record')
	end
	if redis.call('PTTL', KEYS[1]) - g > 0 then
		return 3
	end
end
redis.call('DEL', KEYS[1])
return 1
`)

// entryOf decodes the reply of inspectScript for the record of key.
func entryOf(key idem.Key, reply any) (idem.Entry, error) {
	v, ok := reply.([]any)
	if !ok || len(v) != 4 {
		return idem.Entry{}, fmt.Errorf("unexpected reply %v", reply)
	}
	rec, _ := v[0].(string)
	pttl, _ := v[1].(int64)
	sec, err1 := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(v[3]), 10, 64)
	if err1 != nil || err2 != nil {
		return idem.Entry{}, fmt.Errorf("unexpected TIME %v %v", v[2], v[3])
	}
	now := time.Unix(sec, usec*1000)
	e := idem.Entry{Key: idem.Key{ID: key.ID}, Expires: now.Add(time.Duration(pttl) * time.Millisecond)}
	if err := decodeRecord(rec, &e.Record); err != nil {
		return idem.Entry{}, err
	}
	if e.Status == idem.StatusProcessing {
		j := strings.IndexByte(rec[headLen:], ':')
		g, _ := strconv.ParseInt(rec[headLen+j+1:], 10, 64)
		left := max(time.Duration(pttl-g)*time.Millisecond, 0)
		e.LeaseLeft, e.LeaseUntil = left, now.Add(time.Duration(pttl-g)*time.Millisecond)
	}
	return e, nil
}

// Lookup implements idem.AdminStore: one script on the record's key. The
// Entry has no tenant, operation, text or creation time (not stored).
func (s *Store) Lookup(ctx context.Context, key idem.Key) (idem.Entry, error) {
	rk := s.RedisKey(key)
	res, err := eval(ctx, s.client, inspectScript, []any{3: rk}, redis.NewCmd)
	if errors.Is(err, redis.Nil) {
		return idem.Entry{}, errorf("lookup", key, idem.ErrNotFound)
	}
	if err != nil {
		return idem.Entry{}, errorf("lookup", key, err)
	}
	e, err := entryOf(key, res.Val())
	if err != nil {
		return idem.Entry{}, errorf("lookup", key, err)
	}
	return e, nil
}

// Forget implements idem.AdminStore: one script, fenced by the token and
// status, on the record's key.
func (s *Store) Forget(ctx context.Context, req idem.ForgetRequest) error {
	var tok [8]byte
	binary.BigEndian.PutUint64(tok[:], uint64(req.Token))
	force := "0"
	if req.Force {
		force = "1"
	}
	res, err := eval(ctx, s.client, forgetScript,
		[]any{3: s.RedisKey(req.Key), string(tok[:]), statusDigits[min(int(req.Status), 3)], force}, redis.NewIntCmd)
	if err != nil {
		return errorf("forget", req.Key, err)
	}
	switch res.Val() {
	case 1:
		return nil
	case 0:
		return errorf("forget", req.Key, idem.ErrNotFound)
	case 3:
		return errorf("forget", req.Key, idem.ErrLeaseLive)
	}
	return errorf("forget", req.Key, idem.ErrRecordChanged)
}

// masters returns the clients of the servers that hold records, in a stable
// order (a Cluster's masters by address).
func (s *Store) masters(ctx context.Context) ([]*redis.Client, error) {
	switch c := s.client.(type) {
	case *redis.Client:
		return []*redis.Client{c}, nil
	case *redis.ClusterClient:
		var (
			mu  sync.Mutex
			out []*redis.Client
		)
		err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			out = append(out, m)
			mu.Unlock()
			return nil
		})
		slices.SortFunc(out, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
		return out, err
	}
	return nil, fmt.Errorf("%T: %w", s.client, errors.ErrUnsupported)
}

// scanPos is a position of a listing: the master, its SCAN cursor, and how
// many keys of that cursor's batch were passed already.
type scanPos struct {
	node int
	cur  uint64
	skip int
}

func parsePos(cursor string, masters int) (scanPos, error) {
	var p scanPos
	if cursor == "" {
		return p, nil
	}
	if _, err := fmt.Sscanf(cursor, "%d.%d.%d", &p.node, &p.cur, &p.skip); err != nil || p.node < 0 || p.node >= masters || p.skip < 0 {
		return p, fmt.Errorf("list cursor %q: not this store's", cursor)
	}
	return p, nil
}

func (p scanPos) String() string { return fmt.Sprintf("%d.%d.%d", p.node, p.cur, p.skip) }

// scan reads the SCAN batch at cursor ("" the start) from its skip on and
// returns its live records that keep(e) accepts, at most limit of them, and
// the cursor after the last key read ("" at the end of the listing).
func (s *Store) scan(ctx context.Context, cursor string, limit int, keep func(idem.Entry) bool) ([]idem.Entry, string, error) {
	ms, err := s.masters(ctx)
	if err != nil {
		return nil, "", err
	}
	pos, err := parsePos(cursor, len(ms))
	if err != nil || len(ms) == 0 {
		return nil, "", err
	}
	m := ms[pos.node]
	keys, next, err := m.Scan(ctx, pos.cur, s.prefix+"r{*", ScanCount).Result()
	if err != nil {
		return nil, "", err
	}
	keys = keys[min(pos.skip, len(keys)):]
	cmds := make([]*redis.Cmd, len(keys))
	if len(keys) > 0 {
		if err := m.ScriptLoad(ctx, inspectScript.src).Err(); err != nil {
			return nil, "", err
		}
		_, err = m.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = p.EvalSha(ctx, inspectScript.sha, []string{k})
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, "", err
		}
	}
	var out []idem.Entry
	for i, k := range keys {
		if errors.Is(cmds[i].Err(), redis.Nil) {
			continue // expired or deleted since the SCAN
		}
		kk, err := idem.KeyFromHex(k[len(s.prefix)+2 : len(k)-1])
		if err != nil {
			continue // not a record of this layout
		}
		e, err := entryOf(kk, cmds[i].Val())
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", k, err)
		}
		if !keep(e) {
			continue
		}
		out = append(out, e)
		if len(out) == limit && i+1 < len(keys) {
			pos.skip += i + 1
			return out, pos.String(), nil
		}
	}
	switch {
	case next != 0:
		return out, scanPos{node: pos.node, cur: next}.String(), nil
	case pos.node+1 < len(ms):
		return out, scanPos{node: pos.node + 1}.String(), nil
	}
	return out, "", nil
}

// List implements idem.AdminStore by status (and Stuck) only: each call
// reads one SCAN batch (about ScanCount keys) on one master, in SCAN's order
// (not newest first), so a page may be short or empty while Next is not,
// and a record may be listed twice (SCAN's guarantee: every record present
// for the whole listing is listed at least once).
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.Page, error) {
	if q.ByTenant || q.Op != "" || q.MaxAge > 0 || q.MinAge > 0 {
		return idem.Page{}, fmt.Errorf("redisstore: list: records keep no tenant, operation or creation time: %w", errors.ErrUnsupported)
	}
	entries, next, err := s.scan(ctx, q.Cursor, q.PageLimit(), func(e idem.Entry) bool { return q.Matches(e, time.Time{}) })
	if err != nil {
		return idem.Page{}, fmt.Errorf("redisstore: list: %w", err)
	}
	return idem.Page{Entries: entries, Next: next}, nil
}

// Stats implements idem.AdminStore by status only (Op ""): it walks every
// record (a full SCAN of every master).
func (s *Store) Stats(ctx context.Context, q idem.StatsQuery) ([]idem.Stat, error) {
	if q.ByTenant || q.Op != "" {
		return nil, fmt.Errorf("redisstore: stats: records keep no tenant or operation: %w", errors.ErrUnsupported)
	}
	m := map[idem.Stat]int64{}
	cursor := ""
	for {
		entries, next, err := s.scan(ctx, cursor, -1, func(idem.Entry) bool { return true })
		if err != nil {
			return nil, fmt.Errorf("redisstore: stats: %w", err)
		}
		for _, e := range entries {
			idem.CountStats(m, e)
		}
		if next == "" {
			return idem.SortedStats(m), nil
		}
		cursor = next
	}
}

var _ idem.AdminStore = (*Store)(nil)
