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
// big-endian token), v (the fingerprint scheme in decimal, present only when
// not 0), l (the lease deadline in milliseconds, by the Redis server's
// clock, PROCESSING only), and for a final record b (body), c (error code),
// m (error message) and x (metadata), each present only when not empty. A
// final record keeps the token that completed it.
//
// Records written before the v field existed read as scheme 0 (unknown),
// which is what their claims meant; no migration is needed, and the key
// prefix did not change.
//
// Redis strings are bytes: tenants, operations, key parts, error messages
// and metadata may hold any byte (NUL, invalid UTF-8). Tenants and
// operations are not stored (Key.ID covers them); the sizes that every
// store accepts (idem.MaxTenantLen, idem.MaxOpLen, idem.MaxOutcomeLen) are
// checked before anything is sent, and larger values are refused with an
// error wrapping idem.ErrTooLarge.
//
// Claim, Complete, Release and Renew are each one Lua script
// (redis.NewScript: EVALSHA, falling back to EVAL when the server does not
// know the script yet), so each is atomic and costs one round trip.
// Complete, Release and Renew are fenced by the claim's token. The record's
// expiry is a PEXPIRE; the lease deadline and LeaseLeft are computed inside
// the script from the server's TIME (Redis 5+ replicates a script's effects,
// not the script, so TIME is allowed). No instant is ever computed from the
// client's clock.
//
// Every script is idempotent for its caller's token, so that go-redis'
// retry of a command whose reply was lost (and the executor's retry) meets
// the applied command as a success: a Claim repeated by the token that holds
// the PROCESSING record is claimed again (with a fresh lease), a Complete
// repeated by the token whose outcome is stored answers nil, and a Release
// of a record that is not there answers nil.
//
// Redis expires records itself (PEXPIRE), so the store has no Sweep.
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
//
// Under noeviction a Redis server past its maxmemory refuses a script's
// first write that may grow memory with an OOM error: a claim that would
// create or take over a record is refused, with an error wrapping
// idem.ErrStoreFull (no method is run, no record is dropped), while replays
// (which write nothing), Complete and Release (whose first write frees
// memory, after which Redis lets a script finish) go on.
package redisstore

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
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

// BoundedBy reports whether every call of the store returns promptly once its
// context's deadline has passed, judged from the client's options: the
// client was built with ContextTimeoutEnabled (go-redis then bounds each
// socket read and write by the context's deadline), or its read and write
// timeouts are both positive and no longer than d (then a call ends at most
// about d after its deadline). Pool waits, dials and retry back-offs follow
// the context in either case. It is false for a client type it does not know
// and for a client whose timeouts are longer or disabled: such a client may
// block past the deadline until its own timeout. runtime/tiered calls the
// fast store on the caller's goroutine when BoundedBy(its fast timeout) is
// true, and on a goroutine it can stop waiting for otherwise.
func (s *Store) BoundedBy(d time.Duration) bool {
	bounded := func(ctxTimeout bool, read, write time.Duration) bool {
		return ctxTimeout || (read > 0 && write > 0 && read <= d && write <= d)
	}
	switch c := s.client.(type) {
	case *redis.Client:
		o := c.Options()
		return bounded(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	case *redis.ClusterClient:
		o := c.Options()
		return bounded(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	case *redis.Ring:
		o := c.Options()
		return bounded(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	}
	return false
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

// claimScript: KEYS[1] record; ARGV fingerprint, token, lease ms, ttl ms,
// scheme (decimal; "0" is not stored). Returns 1 (claimed, or claimed
// already by this token), 2 (taken over) or the blocking record packed into
// one string (see decodeRecord), which costs the client one allocation
// instead of one per field. The server's TIME is read only when a lease is set or
// checked, so a replay does not pay for it; redis.replicate_commands, which
// lets Redis 3.2 and 4 replicate the effects of a script that calls TIME, is
// called there too (from Redis 5 effects replication is the default, from 7
// the only mode, and the call is a no-op).
var claimScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 'f', 't', 'l', 'b', 'c', 'm', 'x', 'v')
local s = r[1]
local function now()
	if redis.replicate_commands then redis.replicate_commands() end
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function scheme(fresh)
	if ARGV[5] ~= '0' then
		redis.call('HSET', KEYS[1], 'v', ARGV[5])
	elseif not fresh then
		redis.call('HDEL', KEYS[1], 'v')
	end
end
if not s then
	redis.call('HSET', KEYS[1], 's', '1', 'f', ARGV[1], 't', ARGV[2], 'l', now() + tonumber(ARGV[3]))
	scheme(true)
	redis.call('PEXPIRE', KEYS[1], ARGV[4])
	return 1
end
local f, t, v = r[2] or '', r[3] or '', r[9] or '0'
if #s ~= 1 or #f ~= 32 or #t ~= 8 or not string.match(v, '^%d+$') then
	return redis.error_reply('malformed record')
end
if s == '1' then
	if t == ARGV[2] and f == ARGV[1] then
		local lease = tonumber(ARGV[3])
		local ttl = redis.call('PTTL', KEYS[1])
		if ttl >= 0 and ttl < lease then
			lease = ttl
		end
		redis.call('HSET', KEYS[1], 'l', now() + lease)
		return 1
	end
	local n = now()
	local left = (tonumber(r[4]) or 0) - n
	if left <= 0 then
		if f == ARGV[1] then
			redis.call('HSET', KEYS[1], 't', ARGV[2], 'l', n + tonumber(ARGV[3]))
			scheme(false)
			redis.call('PEXPIRE', KEYS[1], ARGV[4])
			return 2
		end
		left = 0
	end
	return s .. f .. t .. v .. ':' .. string.format('%d', left)
end
local c, m, x = r[6] or '', r[7] or '', r[8] or ''
return s .. f .. t .. v .. ':' .. #c .. ':' .. #m .. ':' .. #x .. ':' .. c .. m .. x .. (r[5] or '')
`)

// completeScript: KEYS[1] record; ARGV token, ttl ms, then the HSET
// field-value pairs of the outcome (s and the non-empty b, c, m, x, built by
// outcomeArgs). Returns 1, 2 when the record is final under token already
// (a repeated Complete: the stored outcome stays), or 0 when the record is
// absent or holds another token.
var completeScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 't')
if not r[1] or r[2] ~= ARGV[1] then
	return 0
end
if r[1] ~= '1' then
	return 2
end
redis.call('HDEL', KEYS[1], 'l')
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// releaseScript: KEYS[1] record; ARGV token. Returns 1 (released, or
// absent), or 0 when the record is final or holds another token.
var releaseScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 't')
if not r[1] then
	return 1
end
if r[1] ~= '1' or r[2] ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
return 1
`)

// renewScript: KEYS[1] record; ARGV token, lease ms. Returns 1, or 0 when
// the record is not PROCESSING under token. The lease ends lease from the
// server's now, or with the record if that is sooner.
var renewScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 's', 't')
if r[1] ~= '1' or r[2] ~= ARGV[1] then
	return 0
end
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local n = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl >= 0 and ttl < lease then
	lease = ttl
end
redis.call('HSET', KEYS[1], 'l', n + lease)
return 1
`)

// seedScript: KEYS[1] record; ARGV ttl ms, then the HSET field-value pairs
// of the record (f, t, v when the scheme is not 0, s and the non-empty b,
// c, m, x). Returns 1, or 0 when
// a final record was kept.
var seedScript = redis.NewScript(`
local s = redis.call('HGET', KEYS[1], 's')
if s and s ~= '1' then
	return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// outcomeArgs appends the HSET field-value pairs of out (s, then b, c, m, x
// when not empty) to args.
func outcomeArgs(args []any, out idem.Outcome) []any {
	args = append(args, "s", statusDigits[out.Status])
	if len(out.Body) > 0 {
		args = append(args, "b", out.Body)
	}
	if out.ErrCode != "" {
		args = append(args, "c", out.ErrCode)
	}
	if out.ErrMessage != "" {
		args = append(args, "m", out.ErrMessage)
	}
	if len(out.Meta) > 0 {
		args = append(args, "x", out.Meta)
	}
	return args
}

// statusDigits are the stored status digits, boxed once.
var statusDigits = [...]any{"0", "1", "2", "3"}

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
//
// A claim repeated by the token that holds the PROCESSING record (go-redis'
// retry after a lost reply) is claimed again, with its lease set afresh
// from the server's now (never beyond the record's expiry).
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := checkKey(req.Key); err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	if req.TTL <= 0 {
		return idem.Claim{}, errorf("claim", req.Key, errors.New("ttl must be positive"))
	}
	lease := min(req.Lease, req.TTL)
	// The fingerprint and the token share one allocation.
	buf := make([]byte, 0, len(req.Fingerprint)+8)
	buf = append(buf, req.Fingerprint[:]...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(req.Token))
	res, err := claimScript.Run(ctx, s.client, []string{s.RedisKey(req.Key)},
		buf[:len(req.Fingerprint)], buf[len(req.Fingerprint):], millis(lease), millis(req.TTL), schemeArg(req.Scheme)).Result()
	if err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	switch v := res.(type) {
	case int64:
		return idem.Claim{Claimed: true, TakenOver: v == 2}, nil
	case string:
		var c idem.Claim
		if err := decodeRecord(v, &c.Record); err != nil {
			return idem.Claim{}, errorf("claim", req.Key, err)
		}
		return c, nil
	default:
		return idem.Claim{}, errorf("claim", req.Key, fmt.Errorf("unexpected reply %T", res))
	}
}

// schemeArg is the claim script's scheme argument; the common schemes are
// boxed once.
func schemeArg(v uint32) any {
	if v < uint32(len(smallSchemes)) {
		return smallSchemes[v]
	}
	return strconv.FormatUint(uint64(v), 10)
}

var smallSchemes = [...]any{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// errorf wraps err with the store's name, the operation and the key's ID.
// A Redis server out of memory under maxmemory-policy noeviction (an "OOM"
// error reply) is a full store: the error wraps idem.ErrStoreFull too.
func errorf(op string, k idem.Key, err error) error {
	var re redis.Error
	if errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ") {
		return fmt.Errorf("redisstore: %s %s: %w: %w", op, k.Hex(), idem.ErrStoreFull, err)
	}
	return fmt.Errorf("redisstore: %s %s: %w", op, k.Hex(), err)
}

func checkKey(k idem.Key) error {
	if len(k.Tenant) > idem.MaxTenantLen {
		return fmt.Errorf("tenant of %d bytes (at most %d): %w", len(k.Tenant), idem.MaxTenantLen, idem.ErrTooLarge)
	}
	if len(k.Op) > idem.MaxOpLen {
		return fmt.Errorf("operation name of %d bytes (at most %d): %w", len(k.Op), idem.MaxOpLen, idem.ErrTooLarge)
	}
	return nil
}

// Complete implements idem.Store: one fenced script replaces the PROCESSING
// record holding token with out and sets its expiry to ttl. Complete
// repeated by the token whose outcome is stored answers nil and keeps the
// stored outcome.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := checkOutcome(out, ttl); err != nil {
		return errorf("complete", key, err)
	}
	args := outcomeArgs(append(make([]any, 0, 12), tokenBytes(token), millis(ttl)), out)
	n, err := completeScript.Run(ctx, s.client, []string{s.RedisKey(key)}, args...).Int64()
	if err != nil {
		return errorf("complete", key, err)
	}
	if n == 0 {
		return errorf("complete", key, idem.ErrLeaseLost)
	}
	return nil
}

// Release implements idem.Store: one fenced script deletes the PROCESSING
// record holding token. Releasing a record that is not there (released
// already, or expired) answers nil; a final record is never released.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	n, err := releaseScript.Run(ctx, s.client, []string{s.RedisKey(key)}, tokenBytes(token)).Int64()
	if err != nil {
		return errorf("release", key, err)
	}
	if n == 0 {
		return errorf("release", key, idem.ErrLeaseLost)
	}
	return nil
}

// Renew implements idem.Renewer: one fenced script sets the lease of the
// PROCESSING record holding token to end lease from the server's now, or
// with the record if that is sooner.
func (s *Store) Renew(ctx context.Context, key idem.Key, token idem.Token, lease time.Duration) error {
	if lease <= 0 {
		return errorf("renew", key, fmt.Errorf("lease %v is not positive", lease))
	}
	n, err := renewScript.Run(ctx, s.client, []string{s.RedisKey(key)}, tokenBytes(token), millis(lease)).Int64()
	if err != nil {
		return errorf("renew", key, err)
	}
	if n == 0 {
		return errorf("renew", key, idem.ErrLeaseLost)
	}
	return nil
}

// Seed implements idem.Seeder: one script stores rec (its fingerprint,
// scheme, token and outcome) as the record of key unless a final record is
// already there.
func (s *Store) Seed(ctx context.Context, key idem.Key, rec idem.Record, ttl time.Duration) error {
	if err := checkKey(key); err != nil {
		return errorf("seed", key, err)
	}
	if err := checkOutcome(rec.Outcome, ttl); err != nil {
		return errorf("seed", key, err)
	}
	if rec.Status != rec.Outcome.Status {
		return errorf("seed", key, fmt.Errorf("record status %v differs from its outcome's %v", rec.Status, rec.Outcome.Status))
	}
	args := append(make([]any, 0, 17), millis(ttl), "f", rec.Fingerprint[:], "t", tokenBytes(rec.Token))
	if rec.Scheme != 0 {
		args = append(args, "v", schemeArg(rec.Scheme))
	}
	err := seedScript.Run(ctx, s.client, []string{s.RedisKey(key)}, outcomeArgs(args, rec.Outcome)...).Err()
	if err != nil {
		return errorf("seed", key, err)
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
	if n := len(out.Body) + len(out.ErrCode) + len(out.ErrMessage) + len(out.Meta); n > idem.MaxOutcomeLen {
		return fmt.Errorf("outcome of %d bytes (at most %d): %w", n, idem.MaxOutcomeLen, idem.ErrTooLarge)
	}
	return nil
}

// decodeRecord reads the claim script's packed record into rec: the status
// digit, the 32-byte fingerprint, the 8-byte token, the scheme in decimal
// and ':', then for a PROCESSING record the lease left in milliseconds
// (decimal), and for a final record
// the decimal lengths of the error code, message and metadata, each followed
// by ':', then those three fields and the body (the rest). Strings share the
// reply's memory; Body and Meta are copies.
func decodeRecord(v string, rec *idem.Record) error {
	const head = 1 + len(idem.Fingerprint{}) + 8
	if len(v) < head || v[0] < '1' || v[0] > '3' {
		return errors.New("malformed record reply")
	}
	rec.Status = idem.Status(v[0] - '0')
	copy(rec.Fingerprint[:], v[1:33])
	var tok uint64
	for i := 33; i < head; i++ {
		tok = tok<<8 | uint64(v[i])
	}
	rec.Token = idem.Token(tok)
	rest := v[head:]
	j := strings.IndexByte(rest, ':')
	scheme, err := strconv.ParseUint(rest[:max(j, 0)], 10, 32)
	if j < 0 || err != nil {
		return errors.New("malformed record reply: scheme")
	}
	rec.Scheme, rest = uint32(scheme), rest[j+1:]
	if rec.Status == idem.StatusProcessing {
		left, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return errors.New("malformed record reply: lease")
		}
		if left > 0 {
			rec.LeaseLeft = time.Duration(left) * time.Millisecond
		}
		return nil
	}
	var lens [3]int
	for i := range lens {
		j := strings.IndexByte(rest, ':')
		n, err := strconv.Atoi(rest[:max(j, 0)])
		if j < 0 || err != nil || n < 0 {
			return errors.New("malformed record reply: lengths")
		}
		lens[i], rest = n, rest[j+1:]
	}
	if lens[0]+lens[1]+lens[2] > len(rest) {
		return errors.New("malformed record reply: lengths")
	}
	out := &rec.Outcome
	out.Status = rec.Status
	out.ErrCode, rest = rest[:lens[0]], rest[lens[0]:]
	out.ErrMessage, rest = rest[:lens[1]], rest[lens[1]:]
	if lens[2] > 0 {
		out.Meta = []byte(rest[:lens[2]])
	}
	if rest = rest[lens[2]:]; rest != "" {
		out.Body = []byte(rest)
	}
	return nil
}

var (
	_ idem.Renewer = (*Store)(nil)
	_ idem.Seeder  = (*Store)(nil)
)
