// Package redisstore is an idempotency store (idem.Store) on Redis, through
// github.com/redis/go-redis/v9. A single node, Sentinel (failover) and
// Cluster clients all work: New takes a redis.UniversalClient.
//
// # How a record is kept
//
// Each record is one Redis hash under one key, prefix + "{" + hex(Key.ID) + "}".
// The braces are a Cluster hash tag, so a record, and every script that
// touches it, lives in one slot. Key.ID already covers the tenant and the
// operation, so they are not repeated in the key. The fields are short and
// binary: s (status digit), f (the 32-byte fingerprint), t (the 8-byte
// big-endian token), l (the lease deadline in milliseconds, by the Redis
// server's clock, PROCESSING only), and for a final record b (body), c (error
// code), m (error message) and x (metadata), each present only when not empty.
//
// Claim, Complete and Release are each one Lua script (redis.NewScript:
// EVALSHA, falling back to EVAL when the server does not know the script yet),
// so each is atomic and costs one round trip. Complete and Release are fenced
// by the claim's token. The record's expiry is a PEXPIRE; the lease deadline
// and LeaseLeft are computed inside the script from the server's TIME (Redis
// 5+ replicates a script's effects, not the script, so TIME is allowed). No
// instant is ever computed from the client's clock.
//
// # What it guarantees, and what it does not
//
// While the Redis server that acknowledged a claim or an outcome keeps it,
// every retry with the same key sees it: exactly one of concurrent claims
// executes, and retries replay the stored outcome.
//
// Redis can lose an acknowledged record: replication is asynchronous, so a
// failover to a replica that had not received the write forgets it; a server
// restarted without persistence forgets everything; and under maxmemory an
// eviction policy other than noeviction may evict records (volatile-* policies
// can evict them too, since every record has a TTL). A retry that arrives
// after such a loss finds no record and executes the method a second time.
// Use redisstore where a rare duplicate is acceptable (or harmless), and put
// a database behind it for money paths: runtime/tiered runs Redis in front of
// runtime/pgstore, whose unique index is the final line. Run Redis with
// maxmemory-policy noeviction (or enough memory) when it holds records.
package redisstore

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the prefix of record keys when WithPrefix is not given.
const DefaultPrefix = "idem:"

// Store is an idem.Store (and idem.Seeder) on Redis. It is safe for
// concurrent use; it holds no state besides the client and the prefix.
type Store struct {
	client redis.UniversalClient
	prefix string
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every record key (default DefaultPrefix).
// Use it to share a Redis database between services or environments, or to
// match an ACL key pattern. The prefix must not contain '{' or '}', which
// would move the Cluster hash tag; New panics if it does.
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// New returns a Store on client. The client's own options (pool size,
// timeouts, retries) apply to every call; the scripts are loaded into the
// server on first use.
func New(client redis.UniversalClient, opts ...Option) *Store {
	s := &Store{client: client, prefix: DefaultPrefix}
	for _, o := range opts {
		o(s)
	}
	if strings.ContainsAny(s.prefix, "{}") {
		panic(fmt.Sprintf("redisstore: prefix %q contains a brace, which would break the Cluster hash tag", s.prefix))
	}
	return s
}

// RedisKey returns the Redis key that holds the record of k, for operators
// and tests (HGETALL it to look at a record, DEL it to simulate a loss).
func (s *Store) RedisKey(k idem.Key) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + 2 + 2*len(k.ID))
	b.WriteString(s.prefix)
	b.WriteByte('{')
	var h [64]byte
	hex.Encode(h[:], k.ID[:])
	b.Write(h[:])
	b.WriteByte('}')
	return b.String()
}

// claimScript: KEYS[1] record; ARGV fingerprint, token, lease ms, ttl ms.
// Returns 1 (claimed), 2 (taken over) or the blocking record as
// {s, f, t, leaseLeft, b, c, m, x}. The server's TIME is read only when a
// lease is set or checked, so a replay does not pay for it.
// redis.replicate_commands lets Redis 3.2 and 4 replicate the effects of a
// script that calls TIME; from Redis 5 it is the default (from 7 the only
// mode) and the call is a no-op.
var claimScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local function now()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local r = redis.call('HMGET', KEYS[1], 's', 'f', 't', 'l', 'b', 'c', 'm', 'x')
local s = r[1]
if not s then
	redis.call('HSET', KEYS[1], 's', '1', 'f', ARGV[1], 't', ARGV[2], 'l', now() + tonumber(ARGV[3]))
	redis.call('PEXPIRE', KEYS[1], ARGV[4])
	return 1
end
local left = 0
if s == '1' then
	local n = now()
	left = (tonumber(r[4]) or 0) - n
	if left <= 0 then
		left = 0
		if r[2] == ARGV[1] then
			redis.call('HSET', KEYS[1], 't', ARGV[2], 'l', n + tonumber(ARGV[3]))
			redis.call('PEXPIRE', KEYS[1], ARGV[4])
			return 2
		end
	end
end
return {s, r[2], r[3], left, r[5], r[6], r[7], r[8]}
`)

// outcomeFields appends the non-empty outcome fields of ARGV[i..i+3] (body,
// code, message, meta) to the HSET arguments a.
const outcomeFields = `
local function outcome(a, i)
	local names = {'b', 'c', 'm', 'x'}
	for j = 1, 4 do
		local v = ARGV[i + j - 1]
		if v ~= '' then
			a[#a + 1] = names[j]
			a[#a + 1] = v
		end
	end
	return a
end
`

// completeScript: KEYS[1] record; ARGV token, status, ttl ms, body, code,
// message, meta. Returns 1, or 0 when the record is not PROCESSING under token.
var completeScript = redis.NewScript(outcomeFields + `
local r = redis.call('HMGET', KEYS[1], 's', 't')
if r[1] ~= '1' or r[2] ~= ARGV[1] then
	return 0
end
redis.call('HDEL', KEYS[1], 'l')
redis.call('HSET', KEYS[1], unpack(outcome({'s', ARGV[2]}, 4)))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// releaseScript: KEYS[1] record; ARGV token. Returns 1, or 0 when the record
// is not PROCESSING under token.
var releaseScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 't')
if r[1] ~= '1' or r[2] ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
return 1
`)

// seedScript: KEYS[1] record; ARGV fingerprint, token, status, ttl ms, body,
// code, message, meta. Returns 1, or 0 when a final record was kept.
var seedScript = redis.NewScript(outcomeFields + `
local s = redis.call('HGET', KEYS[1], 's')
if s and s ~= '1' then
	return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(outcome({'s', ARGV[3], 'f', ARGV[1], 't', ARGV[2]}, 5)))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`)

func tokenBytes(t idem.Token) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(t))
}

// millis rounds d up to whole milliseconds, at least 1: Redis rejects a
// PEXPIRE of 0, and rounding down could end a lease or a record early.
func millis(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return max(ms, 1)
}

// Claim implements idem.Store. It runs one script: it creates the record, or
// takes over a PROCESSING record of the same fingerprint whose lease has
// lapsed by the server's clock, or returns the live record.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if req.TTL <= 0 {
		return idem.Claim{}, fmt.Errorf("redisstore: claim %s: ttl must be positive", req.Key.Text)
	}
	lease := min(req.Lease, req.TTL)
	res, err := claimScript.Run(ctx, s.client, []string{s.RedisKey(req.Key)},
		req.Fingerprint[:], tokenBytes(req.Token), millis(lease), millis(req.TTL)).Result()
	if err != nil {
		return idem.Claim{}, fmt.Errorf("redisstore: claim %s: %w", req.Key.Text, err)
	}
	switch v := res.(type) {
	case int64:
		return idem.Claim{Claimed: true, TakenOver: v == 2}, nil
	case []any:
		rec, err := decodeRecord(v)
		if err != nil {
			return idem.Claim{}, fmt.Errorf("redisstore: claim %s: %w", req.Key.Text, err)
		}
		return idem.Claim{Record: rec}, nil
	default:
		return idem.Claim{}, fmt.Errorf("redisstore: claim %s: unexpected reply %T", req.Key.Text, res)
	}
}

// Complete implements idem.Store: one fenced script replaces the PROCESSING
// record holding token with out and sets its expiry to ttl.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := checkOutcome(out, ttl); err != nil {
		return fmt.Errorf("redisstore: complete %s: %w", key.Text, err)
	}
	n, err := completeScript.Run(ctx, s.client, []string{s.RedisKey(key)},
		tokenBytes(token), statusDigit(out.Status), millis(ttl),
		out.Body, out.ErrCode, out.ErrMessage, out.Meta).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: complete %s: %w", key.Text, err)
	}
	if n == 0 {
		return fmt.Errorf("redisstore: complete %s: %w", key.Text, idem.ErrLeaseLost)
	}
	return nil
}

// Release implements idem.Store: one fenced script deletes the PROCESSING
// record holding token.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	n, err := releaseScript.Run(ctx, s.client, []string{s.RedisKey(key)}, tokenBytes(token)).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: release %s: %w", key.Text, err)
	}
	if n == 0 {
		return fmt.Errorf("redisstore: release %s: %w", key.Text, idem.ErrLeaseLost)
	}
	return nil
}

// Seed implements idem.Seeder: one script stores out as the record of key
// unless a final record is already there.
func (s *Store) Seed(ctx context.Context, key idem.Key, fp idem.Fingerprint, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := checkOutcome(out, ttl); err != nil {
		return fmt.Errorf("redisstore: seed %s: %w", key.Text, err)
	}
	err := seedScript.Run(ctx, s.client, []string{s.RedisKey(key)},
		fp[:], tokenBytes(token), statusDigit(out.Status), millis(ttl),
		out.Body, out.ErrCode, out.ErrMessage, out.Meta).Err()
	if err != nil {
		return fmt.Errorf("redisstore: seed %s: %w", key.Text, err)
	}
	return nil
}

func checkOutcome(out idem.Outcome, ttl time.Duration) error {
	if out.Status != idem.StatusSucceeded && out.Status != idem.StatusFailedFinal {
		return fmt.Errorf("outcome status %v is not final", out.Status)
	}
	if ttl <= 0 {
		return errors.New("ttl must be positive")
	}
	return nil
}

func statusDigit(st idem.Status) string { return string(rune('0' + st)) }

// decodeRecord turns the script's {s, f, t, leaseLeft, b, c, m, x} reply
// into a Record.
func decodeRecord(v []any) (idem.Record, error) {
	var rec idem.Record
	if len(v) != 8 {
		return rec, fmt.Errorf("malformed record reply of %d elements", len(v))
	}
	str := func(i int) string {
		s, _ := v[i].(string)
		return s
	}
	bytes := func(i int) []byte {
		if s := str(i); s != "" {
			return []byte(s)
		}
		return nil
	}
	st := str(0)
	if len(st) != 1 || st[0] < '1' || st[0] > '3' {
		return rec, fmt.Errorf("malformed record: status %q", st)
	}
	rec.Status = idem.Status(st[0] - '0')
	fp, tok := str(1), str(2)
	if len(fp) != len(rec.Fingerprint) || len(tok) != 8 {
		return rec, errors.New("malformed record: fingerprint or token")
	}
	copy(rec.Fingerprint[:], fp)
	rec.Token = idem.Token(binary.BigEndian.Uint64([]byte(tok)))
	if left, ok := v[3].(int64); ok && left > 0 && rec.Status == idem.StatusProcessing {
		rec.LeaseLeft = time.Duration(left) * time.Millisecond
	}
	if rec.Status != idem.StatusProcessing {
		rec.Outcome = idem.Outcome{
			Status:     rec.Status,
			Body:       bytes(4),
			ErrCode:    str(5),
			ErrMessage: str(6),
			Meta:       bytes(7),
		}
	}
	return rec, nil
}

var (
	_ idem.Store  = (*Store)(nil)
	_ idem.Seeder = (*Store)(nil)
)
