// Package redisstore is an idempotency store (idem.Store) on Redis 7.0 or
// later, through github.com/redis/go-redis/v9. A single node, Sentinel
// (failover) and Cluster clients all work: New takes a
// redis.UniversalClient.
//
// # How a record is kept
//
// Each record is one Redis string under one key, prefix + "r{" +
// hex(Key.ID) + "}". The braces are a Cluster hash tag, so a record, and
// every script that touches it, lives in one slot; Key.ID already covers
// the tenant and the operation, so they are not repeated in the key. The
// value is binary: the status digit, the 32-byte fingerprint, the 8-byte
// big-endian token, the fingerprint scheme in decimal and ':', then
//   - for a PROCESSING record, in decimal, how many milliseconds of the
//     record's life remain when its lease lapses: the lease has lapsed once
//     the key's PTTL, read by the server, is no more than that;
//   - for a final record, the decimal lengths of the error code, error
//     message and metadata, each followed by ':', then those three fields
//     and the body (the rest).
//
// A final record keeps the token that completed it. The record's expiry is
// the key's own PX, so Redis expires records itself and the store has no
// Sweep.
//
// # Round trips
//
// A Claim is one command, SET key <PROCESSING record> NX PX <ttl> GET: a nil
// reply means the key was free and is now claimed; otherwise the stored
// record comes back in the same round trip, and a final one (a replay) is
// answered from it. Only a PROCESSING record costs a second round trip, a
// Lua script that reads the lease from the key's PTTL, takes over a lapsed
// lease of the same fingerprint (with a fresh token and record), recognises
// the caller's own token (a retry whose first reply was lost: it is claimed
// again, with its lease set afresh from the server's now, never beyond the
// record's expiry), or returns the record with its lease left. Complete,
// Release and Renew are each one Lua script fenced by the token, sent by
// its SHA-1 (EVALSHA, falling back to EVAL when the server does not know
// the script yet), so each is atomic and costs one round trip; Complete's
// makes two Redis calls, a GETRANGE of the record's head and one SET of
// the final record with its PX. No instant is ever computed from the
// client's clock: leases and expiries are durations that the server counts
// down (PX, PTTL).
//
// A claim of a free key is answered nil by SET … GET, which go-redis
// reports as redis.Nil and runs through its retry classification (about 17
// allocations, measured at about 2 µs a call here); a Lua claim that
// answered otherwise would cost the server more than that (see
// docs/decisions/redis-hot-paths.md).
//
// Every operation is idempotent for its caller's token, so that go-redis'
// retry of a command whose reply was lost (and the executor's retry) meets
// the applied command as a success: a Claim repeated by the token that holds
// the PROCESSING record is claimed again (with a fresh lease), a Complete
// repeated by the token whose outcome is stored answers nil, and a Release
// of a record that is not there answers nil.
//
// # Upgrading from the hash layout
//
// Releases before this layout kept a record as a Redis hash under prefix +
// "{" + hex(Key.ID) + "}". The "r" before the brace marks the string
// layout, so the two never meet on one key (whatever the prefix: no
// WRONGTYPE error), and no migration runs: records of the old layout are
// ignored and expire by their own TTL. While instances of both releases
// serve the same keys (a rolling deploy), and until the old records' TTL
// has passed, a retry answered by the other release does not see the first
// call's record and may execute again, exactly like after a Redis failover
// (see below). Where that matters, stop the old release before starting the
// new one and wait out the longest TTL before retries of old calls are
// accepted, or run Redis behind runtime/tiered, whose durable store decides
// every claim: there the change of layout costs one repair per key.
//
// Redis strings are bytes: tenants, operations, key parts, error messages
// and metadata may hold any byte (NUL, invalid UTF-8). Tenants and
// operations are not stored (Key.ID covers them); the sizes that every
// store accepts (idem.MaxTenantLen, idem.MaxOpLen, idem.MaxOutcomeLen) are
// checked before anything is sent, and larger values are refused with an
// error wrapping idem.ErrTooLarge.
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
// Store outages: once the method ran, the executor keeps its outcome and
// retries Complete for as long as the claim can be live, so a server that
// is unreachable for less than the lease (and keeps its records) loses
// nothing and runs nothing twice. In lease mode, a store outage longer than
// the lease after the method ran can run it again; transactional mode
// cannot. (redisstore has lease mode only; tiered.NewTx and pgstore.NewTx
// are transactional.)
//
// Under noeviction a Redis server past its maxmemory refuses a command, or
// a script's first write, that may grow memory with an OOM error: a claim
// that would create or take over a record is refused, with an error
// wrapping idem.ErrStoreFull (no method is run, no record is dropped),
// while replays (which write nothing), Complete (whose script is flagged
// allow-oom, so that a method that ran gets its outcome stored) and Release
// (whose only write, a DEL, Redis allows at maxmemory) go on. A refusal
// costs what a claim costs: the refused SET (Redis checks its memory before
// running a command) and a GET that answers a record the key holds.
//
// # Tenant share
//
// WithTenantShare caps the records one tenant creates per window, so that
// one tenant sending fresh keys cannot fill the server for the others; it
// is off by default (the store knows neither the server's memory nor the
// records' TTL). See docs/decisions/tenant-share.md.
//
// With WithTenantShare(n, window), each tenant has a counter, one small Redis hash under prefix + "t{" +
// hex(SHA-256(tenant)[:16]) + "}", counting the records its claims created
// in fixed windows of the server's clock (TIME); a claim that would create
// a record when the tenant's counts of the current and the previous window
// together reach n is refused with an error wrapping a
// *idem.TenantQuotaError (which wraps idem.ErrStoreFull): only that tenant is
// refused, the method is not called, and its replays, outcomes and
// releases go on. Set window to the longest TTL of the records (the
// Methods' TTL): records then live at most one window, so a tenant holds at
// most n of them at any time. Redis expires records by itself, so the
// counter is a bound on the records created, not a count of those held:
// a released or expired record gives its place back only when its window
// passes.
//
// A claim that creates a record costs a second round trip for the counter,
// and a refused one a third (the record it created is deleted again);
// replays and claims of held keys cost nothing more. For a second after a
// refusal, the tenant's claims only GET their key (a replay is answered, a
// new key refused without creating a record): a flooding tenant's claims
// cost one round trip each.
//
// # Redis Cluster
//
// Pass a *redis.ClusterClient: each record and every script that touches
// it live in the slot of the record's hash tag, and go-redis follows MOVED
// and ASK while slots move. go-redis notices a failover only when it
// reloads its slot map: on a MOVED or ASK reply, on a READONLY reply from a
// demoted master, and otherwise when the map is older than
// ClusterOptions.ClusterStateReloadInterval (default 60s), checked on the
// next command. A refused connection to a dead master does not reload it,
// so with the default the slots of a master that died are sent to its dead
// address for up to a minute after its replica took over (every call on
// those keys fails meanwhile; behind runtime/tiered they go to the durable
// store). Set ClusterStateReloadInterval to a few seconds or less (the
// example uses one second: one CLUSTER SLOTS per client and interval, and
// only while it sends commands), or call ClusterClient.ReloadState when
// calls fail with connection errors.
//
// # Client options
//
// Behind runtime/tiered, build the client with ContextTimeoutEnabled: true
// (or read and write timeouts no longer than tiered's fast timeout): the
// store's BoundedBy then says that its calls end at their context's
// deadline, and tiered calls it on the caller's goroutine instead of
// handing every call to a goroutine of its own (measured +50 µs on a
// replay of about 35 µs on a loaded 2-core machine).
package redisstore

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the prefix of record keys when WithPrefix is not given.
const DefaultPrefix = "idem:"

// Store is an idem.Store (and idem.Seeder) on Redis. It is safe for
// concurrent use; it holds no state besides the client, its options and,
// with WithTenantShare, the tenants refused in the last second.
type Store struct {
	client redis.UniversalClient
	prefix string
	share  int64            // WithTenantShare's n; 0: none
	window int64            // WithTenantShare's window, in milliseconds
	over   *hints           // tenants refused in the last second (see overShare)
	now    func() time.Time // the clock of over (time.Now; tests freeze it)
}

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every record key (default DefaultPrefix).
// Use it to share a Redis database between services or environments, or to
// match an ACL key pattern. The prefix must not contain '{' or '}', which
// would move the Cluster hash tag; New panics if it does.
func WithPrefix(prefix string) Option { return func(s *Store) { s.prefix = prefix } }

// WithTenantShare caps the records one tenant creates at n per window, so
// that one tenant sending fresh keys cannot fill the Redis server for every
// other (by default there is no share). A claim beyond the share is refused
// for that tenant alone with an error wrapping a *idem.TenantQuotaError
// (which wraps idem.ErrStoreFull); the method is not called. Set window to
// the longest TTL of the records. The single key space of idem.SingleTenant
// (tenant "") has no share. New panics if n is negative, or if n is
// positive and window is less than a millisecond. See the package
// documentation, section Tenant share.
func WithTenantShare(n int64, window time.Duration) Option {
	return func(s *Store) {
		if n < 0 || n > 0 && window < time.Millisecond {
			panic(fmt.Sprintf("redisstore: WithTenantShare(%d, %v): the share must not be negative, and its window at least 1ms", n, window))
		}
		s.share, s.window = n, int64(window/time.Millisecond)
	}
}

// New returns a Store on client. The client's own options (pool size,
// timeouts, retries) apply to every call; the scripts are loaded into the
// server on first use.
func New(client redis.UniversalClient, opts ...Option) *Store {
	s := &Store{client: client, prefix: DefaultPrefix, over: new(hints), now: time.Now}
	for _, o := range opts {
		o(s)
	}
	if strings.ContainsAny(s.prefix, "{}") {
		panic(fmt.Sprintf("redisstore: prefix %q contains a brace, which would break the Cluster hash tag", s.prefix))
	}
	return s
}

// BoundedBy implements idem.BoundedStore: it reports whether every call of
// the store returns promptly once its context's deadline has passed, judged
// from the client's options: the client was built with
// ContextTimeoutEnabled (go-redis then bounds each socket read and write by
// the context's deadline), or its read and write timeouts are both positive
// and no longer than d (then a call ends at most about d after its
// deadline). Pool waits, dials and retry back-offs follow
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
// and tests (GET it to look at a record, DEL it to simulate a loss).
func (s *Store) RedisKey(k idem.Key) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + keyLen)
	s.writeKey(&b, k)
	return b.String()
}

// keyLen is the length of a record key without its prefix.
const keyLen = 3 + 2*len(idem.Key{}.ID)

// writeKey writes the Redis key of k to b.
func (s *Store) writeKey(b *strings.Builder, k idem.Key) {
	b.WriteString(s.prefix)
	b.WriteString("r{")
	var h [2 * len(k.ID)]byte
	hex.Encode(h[:], k.ID[:])
	b.Write(h[:])
	b.WriteByte('}')
}

// headLen is the length of a record's fixed head: the status digit, the
// fingerprint and the token. The scheme's ':' follows within schemeMax
// digits; the scripts read GETRANGE 0 headRead to see the head of a record
// without copying its outcome.
const (
	headLen   = 1 + len(idem.Fingerprint{}) + 8
	schemeMax = 10 // digits of the largest uint32
)

// shareScript counts a record created by a claim against its tenant's
// share. KEYS[1] the tenant's counter, a hash of the current window's
// number (w) and the counts of the current (c) and previous (p) windows;
// ARGV window ms, share. Returns 1 when counted, 0 when the counts of the
// current and previous windows reach the share (nothing is counted then).
var shareScript = newScript(`
local t = redis.call('TIME')
local w = tonumber(ARGV[1])
local k = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / w)
local v = redis.call('HMGET', KEYS[1], 'w', 'c', 'p')
local cur, prev = 0, 0
local at = tonumber(v[1])
if at == k then
	cur, prev = tonumber(v[2]) or 0, tonumber(v[3]) or 0
elseif at == k - 1 then
	prev = tonumber(v[2]) or 0
end
if cur + prev >= tonumber(ARGV[2]) then
	return 0
end
redis.call('HSET', KEYS[1], 'w', string.format('%d', k), 'c', cur + 1, 'p', prev)
redis.call('PEXPIRE', KEYS[1], 2 * w)
return 1
`)

// TenantKey returns the Redis key of tenant's share counter (see
// WithTenantShare), for operators and tests.
func (s *Store) TenantKey(tenant string) string {
	h := sha256.Sum256([]byte(tenant))
	return s.prefix + "t{" + hex.EncodeToString(h[:16]) + "}"
}

// countShare counts a record that req's claim created against its tenant's
// share; when the share is used it deletes the record again (fenced by the
// claim's token) and returns the refusal.
func (s *Store) countShare(ctx context.Context, req *idem.ClaimRequest, c *call) error {
	if s.share == 0 || req.Key.Tenant == "" {
		return nil
	}
	tk := s.TenantKey(req.Key.Tenant)
	res, err := eval(ctx, s.client, shareScript, []any{3: &tk, s.window, s.share}, redis.NewIntCmd)
	if err == nil && res.Val() == 1 {
		return nil
	}
	// Not counted: the record must not stay. Release it, fenced by the
	// token, as a failed call would, and remember the refusal for a while.
	if err == nil {
		s.over.refuse(req.Key.Tenant, s.now())
	}
	rel, rerr := eval(ctx, s.client, releaseScript, []any{3: &c.key, &c.str[2]}, redis.NewIntCmd) // str[2]: the token
	switch {
	case err != nil:
		return err
	case rerr != nil:
		return fmt.Errorf("%w (and the record created could not be deleted: %w)", &idem.TenantQuotaError{Tenant: req.Key.Tenant, Share: s.share}, rerr)
	case rel.Val() == 0:
		return fmt.Errorf("%w (the record created was taken over before it could be deleted)", &idem.TenantQuotaError{Tenant: req.Key.Tenant, Share: s.share})
	}
	return &idem.TenantQuotaError{Tenant: req.Key.Tenant, Share: s.share}
}

// hints are the tenants refused their share in the last overHint. Tenant
// names come from requests: a hint leaves when its tenant's next claim
// finds it past, and, for tenants never seen again, when the hints have
// doubled since they were last pruned (at least minPrune of them), all
// those past are dropped, so that the hints are at most about twice those
// of the last overHint, at an amortized cost of O(1) per refusal.
type hints struct {
	m     sync.Map     // tenant -> unix nanoseconds until which it is refused
	n     atomic.Int64 // entries of m
	next  atomic.Int64 // prune when n reaches it (0: minPrune)
	prune sync.Mutex   // held by the one pruning
}

// minPrune is the fewest hints that are pruned.
const minPrune = 64

// refuse remembers that tenant was refused at now, pruning the hints
// that are past when they have doubled.
func (h *hints) refuse(tenant string, now time.Time) {
	if _, loaded := h.m.Swap(tenant, now.Add(overHint).UnixNano()); loaded {
		return
	}
	if h.n.Add(1) < max(h.next.Load(), minPrune) || !h.prune.TryLock() {
		return
	}
	defer h.prune.Unlock()
	at := now.UnixNano()
	h.m.Range(func(k, v any) bool {
		if v.(int64) <= at {
			h.forget(k.(string), v)
		}
		return true
	})
	h.next.Store(2 * h.n.Load())
}

// forget drops tenant's hint v.
func (h *hints) forget(tenant string, v any) {
	if h.m.CompareAndDelete(tenant, v) {
		h.n.Add(-1)
	}
}

// overHint is how long a tenant refused its share is refused again without
// a round trip to count (see overShare).
const overHint = time.Second

// overShare reports whether tenant was refused its share less than
// overHint ago (by this Store). Such a tenant's claims only look their key
// up: a replay is answered, a claim of a key that is not there is refused
// without creating a record. The hint is this process's, read from its own
// clock; it only ever refuses earlier, for at most overHint after the
// tenant's count would let it claim again (at a window's end).
func (s *Store) overShare(tenant string) bool {
	if s.share == 0 || tenant == "" {
		return false
	}
	v, ok := s.over.m.Load(tenant)
	if !ok {
		return false
	}
	if s.now().UnixNano() < v.(int64) {
		return true
	}
	s.over.forget(tenant, v)
	return false
}

// contendedScript settles a claim that met a PROCESSING record. KEYS[1]
// record; ARGV fingerprint, token, lease ms, ttl ms, the new PROCESSING
// record. It returns 1 (claimed: the key was free again, or the record holds
// this token, whose lease it sets afresh from the server's now, never beyond
// the record's expiry), 2 (taken over: the lease had lapsed by the key's
// PTTL and the fingerprint is the same), or {record, lease left ms}.
var contendedScript = newScript(`
local v = redis.call('GET', KEYS[1])
if not v then
	redis.call('SET', KEYS[1], ARGV[5], 'PX', ARGV[4])
	return 1
end
local j = string.find(v, ':', 42, true)
if not j or j > 52 then
	return redis.error_reply('malformed record')
end
if string.byte(v, 1) ~= 49 then
	return {v, 0}
end
local g = tonumber(string.sub(v, j + 1))
local pttl = redis.call('PTTL', KEYS[1])
if not g or pttl < 0 then
	return redis.error_reply('malformed record')
end
local f = string.sub(v, 2, 33)
if f == ARGV[1] and string.sub(v, 34, 41) == ARGV[2] then
	local lease = math.min(tonumber(ARGV[3]), pttl)
	redis.call('SET', KEYS[1], string.sub(v, 1, j) .. string.format('%d', pttl - lease), 'KEEPTTL')
	return 1
end
local left = pttl - g
if left <= 0 then
	if f == ARGV[1] then
		redis.call('SET', KEYS[1], ARGV[5], 'PX', ARGV[4])
		return 2
	end
	left = 0
end
return {v, left}
`)

// completeScript: KEYS[1] record; ARGV token, ttl ms, status digit, the
// final record's tail (lengths, fields and body). Returns 1, 2 when the
// record is final under token already (a repeated Complete: the stored
// outcome stays), or 0 when the record is absent or holds another token.
//
// It makes two Redis calls, a GETRANGE of the head and one SET of the whole
// final record with its PX (each redis.call costs the server about as much
// as the Lua around it). The allow-oom flag lets the SET through on a server
// at maxmemory under noeviction, as Redis lets a script go on once it has
// written: a claimed call's outcome is stored even then, while new claims
// (which it refuses) keep the server from growing.
var completeScript = newScript(`#!lua flags=allow-oom
local h = redis.call('GETRANGE', KEYS[1], 0, 52)
if #h < 42 or string.sub(h, 34, 41) ~= ARGV[1] then
	return 0
end
if string.byte(h, 1) ~= 49 then
	return 2
end
local j = string.find(h, ':', 42, true)
if not j then
	return redis.error_reply('malformed record')
end
redis.call('SET', KEYS[1], ARGV[3] .. string.sub(h, 2, j) .. ARGV[4], 'PX', ARGV[2])
return 1
`)

// releaseScript: KEYS[1] record; ARGV token. Returns 1 (released, or
// absent), or 0 when the record is final or holds another token.
var releaseScript = newScript(`
local h = redis.call('GETRANGE', KEYS[1], 0, 40)
if #h == 0 then
	return 1
end
if string.byte(h, 1) ~= 49 or string.sub(h, 34, 41) ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
return 1
`)

// renewScript: KEYS[1] record; ARGV token, lease ms. Returns 1, or 0 when
// the record is not PROCESSING under token. The lease ends lease from the
// server's now, or with the record if that is sooner.
var renewScript = newScript(`
local h = redis.call('GETRANGE', KEYS[1], 0, 52)
if #h < 42 or string.byte(h, 1) ~= 49 or string.sub(h, 34, 41) ~= ARGV[1] then
	return 0
end
local j = string.find(h, ':', 42, true)
local pttl = redis.call('PTTL', KEYS[1])
if not j or pttl < 0 then
	return redis.error_reply('malformed record')
end
local lease = math.min(tonumber(ARGV[2]), pttl)
redis.call('SET', KEYS[1], string.sub(h, 1, j) .. string.format('%d', pttl - lease), 'KEEPTTL')
return 1
`)

// seedScript: KEYS[1] record; ARGV ttl ms, the final record. Returns 1, or
// 0 when a final record was kept.
var seedScript = newScript(`
local s = redis.call('GETRANGE', KEYS[1], 0, 0)
if s ~= '' and s ~= '1' then
	return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
return 1
`)

// writeHead writes a record's head: the status digit, fingerprint, token,
// scheme and ':'.
func writeHead(b *strings.Builder, st idem.Status, fp *idem.Fingerprint, token idem.Token, scheme uint32) {
	b.WriteByte('0' + byte(st))
	b.Write(fp[:])
	writeToken(b, token)
	writeInt(b, int64(scheme))
	b.WriteByte(':')
}

// writeTail writes a final record's tail: the lengths of the error code,
// message and metadata, each followed by ':', those fields and the body.
func writeTail(b *strings.Builder, out *idem.Outcome) {
	for _, n := range [...]int{len(out.ErrCode), len(out.ErrMessage), len(out.Meta)} {
		writeInt(b, int64(n))
		b.WriteByte(':')
	}
	b.WriteString(out.ErrCode)
	b.WriteString(out.ErrMessage)
	b.Write(out.Meta)
	b.Write(out.Body)
}

// writeToken writes a token as 8 big-endian bytes, as records hold it.
func writeToken(b *strings.Builder, t idem.Token) {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(t))
	b.Write(buf[:])
}

func writeInt(b *strings.Builder, n int64) {
	var buf [20]byte
	b.Write(strconv.AppendInt(buf[:0], n, 10))
}

// statusDigits are the stored status digits, boxed once.
var statusDigits = [...]any{"0", "1", "2", "3"}

// script is a Lua script that eval runs by its SHA-1 (EVALSHA), sending
// its source (EVAL) only when the server does not know it yet, as
// redis.Script does.
type script struct{ src, sha string }

func newScript(src string) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:])}
}

// call holds the arguments of one command, boxed once: args point at the
// key, strings and integers beside them (go-redis writes *string and *int64
// arguments as their values), so that a call costs one allocation for all
// its arguments besides their one string (see Store.build), instead of one
// per argument and one for the argument list.
type call struct {
	args [8]any
	key  string
	str  [3]string
	n    [2]int64
}

// build returns a call whose key is the Redis key of k and whose strings
// str[0] and str[1] are what write(b) writes after it, split where b's
// length was the cut write returns: key and strings share one allocation.
func (s *Store) build(k idem.Key, size int, write func(b *strings.Builder) (cut int)) *call {
	var b strings.Builder
	b.Grow(len(s.prefix) + keyLen + size)
	s.writeKey(&b, k)
	kn := b.Len()
	cut := write(&b)
	all := b.String()
	return &call{key: all[:kn], str: [3]string{all[kn:cut], all[cut:]}}
}

// eval runs sc with args[3:] as its arguments after numkeys 1 (the key
// first), as a command newCmd makes; it sets args[:3]. A command is never
// given arguments another command was given (a hook may keep a command).
func eval[C redis.Cmder](ctx context.Context, client redis.UniversalClient, sc *script, args []any,
	newCmd func(context.Context, ...any) C) (C, error) {
	args[0], args[1], args[2] = "evalsha", sc.sha, 1
	cmd := newCmd(ctx, args...)
	err := client.Process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args = slices.Clone(args)
		args[0], args[1] = "eval", sc.src
		cmd = newCmd(ctx, args...)
		err = client.Process(ctx, cmd)
	}
	return cmd, err
}

// millis rounds d up to whole milliseconds, at least 1: Redis rejects a
// PX of 0, and rounding down could end a lease or a record early.
func millis(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return max(ms, 1)
}

// Claim implements idem.Store. One SET NX GET creates the record or returns
// the stored one; a final record is answered from it. A PROCESSING record
// is settled by one script that reads the lease from the key's PTTL: it
// takes over a lapsed lease of the same fingerprint, or returns the record.
//
// A claim repeated by the token that holds the PROCESSING record (go-redis'
// retry after a lost reply) is claimed again, with its lease set afresh
// from the server's now (never beyond the record's expiry).
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := idem.CheckClaim(req); err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	ttl := millis(req.TTL)
	lease := min(millis(req.Lease), ttl)
	c := s.build(req.Key, headLen+schemeMax+21, func(b *strings.Builder) int {
		writeHead(b, idem.StatusProcessing, &req.Fingerprint, req.Token, req.Scheme)
		writeInt(b, ttl-lease)
		return b.Len()
	})
	// str[0] is the PROCESSING record; the contended script takes its
	// fingerprint and token from it too.
	c.str[1], c.str[2] = c.str[0][1:33], c.str[0][33:headLen]
	c.n[0], c.n[1] = ttl, lease
	var stored string
	var err error
	if s.overShare(req.Key.Tenant) {
		// The tenant was refused a moment ago: look the key up instead of
		// creating a record, so that its flood costs one GET per claim and
		// its replays are still answered.
		if stored, err = s.client.Get(ctx, c.key).Result(); errors.Is(err, redis.Nil) {
			return idem.Claim{}, errorf("claim", req.Key, &idem.TenantQuotaError{Tenant: req.Key.Tenant, Share: s.share})
		}
		if err != nil {
			return idem.Claim{}, errorf("claim", req.Key, err)
		}
		return s.settleClaim(ctx, req, c, stored)
	}
	c.args = [8]any{"set", &c.key, &c.str[0], "px", &c.n[0], "nx", "get"}
	cmd := redis.NewStringCmd(ctx, c.args[:7]...)
	err = s.client.Process(ctx, cmd)
	if errors.Is(err, redis.Nil) {
		if err := s.countShare(ctx, &req, c); err != nil {
			return idem.Claim{}, errorf("claim", req.Key, err)
		}
		return idem.Claim{Claimed: true}, nil
	}
	stored = cmd.Val()
	if isOOM(err) {
		// A server at maxmemory under noeviction refuses SET before
		// looking at the key; a record it holds is still answered.
		var gerr error
		if stored, gerr = s.client.Get(ctx, c.key).Result(); gerr != nil {
			return idem.Claim{}, errorf("claim", req.Key, err)
		}
	} else if err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	return s.settleClaim(ctx, req, c, stored)
}

// settleClaim answers a claim that found the record stored: a final one is
// the answer, a PROCESSING one is settled by the contended script.
func (s *Store) settleClaim(ctx context.Context, req idem.ClaimRequest, c *call, stored string) (idem.Claim, error) {
	var cl idem.Claim
	if err := decodeRecord(stored, &cl.Record); err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	if cl.Record.Status != idem.StatusProcessing {
		return cl, nil
	}
	res, err := eval(ctx, s.client, contendedScript, []any{3: &c.key, &c.str[1], &c.str[2], &c.n[1], &c.n[0], &c.str[0]}, redis.NewCmd)
	if err != nil {
		return idem.Claim{}, errorf("claim", req.Key, err)
	}
	switch v := res.Val().(type) {
	case int64:
		return idem.Claim{Claimed: true, TakenOver: v == 2}, nil
	case []any:
		cl = idem.Claim{}
		if len(v) != 2 {
			return idem.Claim{}, errorf("claim", req.Key, fmt.Errorf("unexpected reply %v", v))
		}
		r, ok1 := v[0].(string)
		left, ok2 := v[1].(int64)
		if !ok1 || !ok2 {
			return idem.Claim{}, errorf("claim", req.Key, fmt.Errorf("unexpected reply %v", v))
		}
		if err := decodeRecord(r, &cl.Record); err != nil {
			return idem.Claim{}, errorf("claim", req.Key, err)
		}
		if cl.Record.Status == idem.StatusProcessing && left > 0 {
			cl.Record.LeaseLeft = time.Duration(left) * time.Millisecond
		}
		return cl, nil
	default:
		return idem.Claim{}, errorf("claim", req.Key, fmt.Errorf("unexpected reply %T", v))
	}
}

// errorf wraps err with the store's name, the operation and the key's ID.
// A Redis server out of memory under maxmemory-policy noeviction (an "OOM"
// error reply) is a full store: the error wraps idem.ErrStoreFull too. An
// answer that can pass (see passing: a read-only replica, a failover, a
// lost connection) is marked with idem.StoreOutage.
func errorf(op string, k idem.Key, err error) error {
	if isOOM(err) {
		return fmt.Errorf("redisstore: %s %s: %w: %w", op, k.Hex(), idem.ErrStoreFull, err)
	}
	return outage(fmt.Errorf("redisstore: %s %s: %w", op, k.Hex(), err))
}

// isOOM reports whether err is a Redis "OOM" error reply.
func isOOM(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "OOM ")
}

// Complete implements idem.Store: one fenced script replaces the PROCESSING
// record holding token with out and sets its expiry to ttl. Complete
// repeated by the token whose outcome is stored answers nil and keeps the
// stored outcome.
func (s *Store) Complete(ctx context.Context, key idem.Key, token idem.Token, out idem.Outcome, ttl time.Duration) error {
	if err := idem.CheckOutcome(&out, ttl); err != nil {
		return errorf("complete", key, err)
	}
	c := s.build(key, 8+3*21+idem.OutcomeLen(&out), func(b *strings.Builder) int {
		writeToken(b, token)
		n := b.Len()
		writeTail(b, &out)
		return n
	})
	c.n[0] = millis(ttl)
	c.args[3], c.args[4], c.args[5], c.args[6], c.args[7] = &c.key, &c.str[0], &c.n[0], statusDigits[out.Status], &c.str[1]
	cmd, err := eval(ctx, s.client, completeScript, c.args[:8], redis.NewIntCmd)
	if err != nil {
		return errorf("complete", key, err)
	}
	if cmd.Val() == 0 {
		return errorf("complete", key, idem.ErrLeaseLost)
	}
	return nil
}

// Release implements idem.Store: one fenced script deletes the PROCESSING
// record holding token. Releasing a record that is not there (released
// already, or expired) answers nil; a final record is never released.
func (s *Store) Release(ctx context.Context, key idem.Key, token idem.Token) error {
	c := s.build(key, 8, func(b *strings.Builder) int {
		writeToken(b, token)
		return b.Len()
	})
	c.args[3], c.args[4] = &c.key, &c.str[0]
	cmd, err := eval(ctx, s.client, releaseScript, c.args[:5], redis.NewIntCmd)
	if err != nil {
		return errorf("release", key, err)
	}
	if cmd.Val() == 0 {
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
	c := s.build(key, 8, func(b *strings.Builder) int {
		writeToken(b, token)
		return b.Len()
	})
	c.n[0] = millis(lease)
	c.args[3], c.args[4], c.args[5] = &c.key, &c.str[0], &c.n[0]
	cmd, err := eval(ctx, s.client, renewScript, c.args[:6], redis.NewIntCmd)
	if err != nil {
		return errorf("renew", key, err)
	}
	if cmd.Val() == 0 {
		return errorf("renew", key, idem.ErrLeaseLost)
	}
	return nil
}

// Seed implements idem.Seeder: one script stores rec (its fingerprint,
// scheme, token and outcome) as the record of key unless a final record is
// already there.
func (s *Store) Seed(ctx context.Context, key idem.Key, rec idem.Record, ttl time.Duration) error {
	if err := idem.CheckKey(key); err != nil {
		return errorf("seed", key, err)
	}
	if err := idem.CheckOutcome(&rec.Outcome, ttl); err != nil {
		return errorf("seed", key, err)
	}
	if rec.Status != rec.Outcome.Status {
		return errorf("seed", key, fmt.Errorf("record status %v differs from its outcome's %v", rec.Status, rec.Outcome.Status))
	}
	c := s.build(key, headLen+schemeMax+1+3*21+idem.OutcomeLen(&rec.Outcome), func(b *strings.Builder) int {
		writeHead(b, rec.Status, &rec.Fingerprint, rec.Token, rec.Scheme)
		writeTail(b, &rec.Outcome)
		return b.Len()
	})
	c.n[0] = millis(ttl)
	c.args[3], c.args[4], c.args[5] = &c.key, &c.n[0], &c.str[0]
	if _, err := eval(ctx, s.client, seedScript, c.args[:6], redis.NewIntCmd); err != nil {
		return errorf("seed", key, err)
	}
	return nil
}

// decodeRecord reads a stored record (see the package documentation) into
// rec. A PROCESSING record's lease is not in the value alone (it needs the
// key's PTTL): LeaseLeft is left 0. Strings share v's memory; Body and
// Meta are copies, made in one allocation.
func decodeRecord(v string, rec *idem.Record) error {
	if len(v) < headLen || v[0] < '1' || v[0] > '3' {
		return errors.New("malformed record")
	}
	rec.Status = idem.Status(v[0] - '0')
	copy(rec.Fingerprint[:], v[1:33])
	var tok uint64
	for i := 33; i < headLen; i++ {
		tok = tok<<8 | uint64(v[i])
	}
	rec.Token = idem.Token(tok)
	rest := v[headLen:]
	j := strings.IndexByte(rest, ':')
	scheme, err := strconv.ParseUint(rest[:max(j, 0)], 10, 32)
	if j < 0 || err != nil {
		return errors.New("malformed record: scheme")
	}
	rec.Scheme, rest = uint32(scheme), rest[j+1:]
	if rec.Status == idem.StatusProcessing {
		if _, err := strconv.ParseInt(rest, 10, 64); err != nil {
			return errors.New("malformed record: lease")
		}
		return nil
	}
	var lens [3]int
	for i := range lens {
		j := strings.IndexByte(rest, ':')
		n, err := strconv.Atoi(rest[:max(j, 0)])
		if j < 0 || err != nil || n < 0 {
			return errors.New("malformed record: lengths")
		}
		lens[i], rest = n, rest[j+1:]
	}
	if lens[0]+lens[1]+lens[2] > len(rest) {
		return errors.New("malformed record: lengths")
	}
	out := &rec.Outcome
	out.Status = rec.Status
	out.ErrCode, rest = rest[:lens[0]], rest[lens[0]:]
	out.ErrMessage, rest = rest[:lens[1]], rest[lens[1]:]
	if rest == "" {
		return nil
	}
	// Meta and Body are adjacent: one copy holds both (Meta's capacity
	// ends where Body begins, so an append to it copies).
	b := []byte(rest)
	if lens[2] > 0 {
		out.Meta = b[:lens[2]:lens[2]]
	}
	if len(b) > lens[2] {
		out.Body = b[lens[2]:]
	}
	return nil
}

var (
	_ idem.Renewer      = (*Store)(nil)
	_ idem.Seeder       = (*Store)(nil)
	_ idem.BoundedStore = (*Store)(nil)
)
