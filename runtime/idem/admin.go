package idem

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// This file declares the operators' capability of a store (issue 25):
// look a record up, list records, forget one so that the next call runs
// again, and count them. See docs/decisions/operator-records.md.

var (
	// ErrNotFound: the store holds no live record under the key (it was
	// never claimed, it expired, or it was released or forgotten).
	ErrNotFound = errors.New("idem: no live record under this key")
	// ErrLeaseLive: Forget was asked for a PROCESSING record whose lease
	// has not lapsed, without Force: a worker may be running the method.
	ErrLeaseLive = errors.New("idem: the record's lease is live (a worker may be running the method)")
	// ErrRecordChanged: Forget found the record changed since it was looked
	// at (another token, or another status: a takeover, a completion, a new
	// claim after an expiry); nothing was forgotten. Look it up again.
	ErrRecordChanged = errors.New("idem: the record changed since it was looked at")
)

// AdminStore is implemented by stores that operators can query and act on
// (memstore, pgstore in every mode, mysqlstore in both, redisstore, tiered,
// sqlitestore): an optional capability, found by a type assertion like
// Renewer. Its methods are for people and tools (cmd/idemctl,
// runtime/idemadmin), never on the path of a call; wrap a store in an Admin
// to get the audit log and event of Forget.
type AdminStore interface {
	// Lookup returns the live record of key. Only key.ID is used (a key
	// built by NewKey, or by KeyFromHex from its hex ID). It returns an
	// error wrapping ErrNotFound when there is none.
	Lookup(ctx context.Context, key Key) (Entry, error)
	// List returns the live records that match q, newest first (by
	// creation), at most q.Limit of them, and the cursor of the next page
	// ("" when there is none). A store that cannot apply a filter returns
	// an error wrapping errors.ErrUnsupported.
	List(ctx context.Context, q ListQuery) (Page, error)
	// Forget deletes the live record of req.Key if it still holds
	// req.Token with req.Status (the version the operator looked at), so
	// that the next call with the key runs the method again. A PROCESSING
	// record whose lease is live is refused with ErrLeaseLive unless
	// req.Force. A record of another token or status is left alone with
	// ErrRecordChanged, an absent one with ErrNotFound. The check and the
	// delete are one atomic step of the store, so a claim that raced the
	// operator (a takeover, a new claim after an expiry) is never lost.
	Forget(ctx context.Context, req ForgetRequest) error
	// Stats counts the live records by operation and status (PROCESSING
	// split into live and lapsed leases). A store that does not keep
	// operations (redisstore) reports them under Op "".
	Stats(ctx context.Context, q StatsQuery) ([]Stat, error)
}

// Entry is one record as an operator sees it.
type Entry struct {
	// Key is the record's key: its ID always, its Tenant, Op and readable
	// Text where the store keeps them (pgstore, sqlitestore and memstore
	// do; redisstore keeps none: they are empty there). memstore keeps Text
	// only when the executor passed it one (an observer or a CallHook).
	Key Key
	// Record is what a claim would see: status, fingerprint, scheme, the
	// fencing token (which names the claim that holds or completed the
	// record: there is no other holder identity), the lease left and the
	// outcome.
	Record
	// Created is when the record was created (a takeover keeps it), by the
	// store's clock; zero where the store does not keep it (redisstore).
	Created time.Time
	// Expires is when the record expires, by the store's clock.
	Expires time.Time
	// LeaseUntil is when a PROCESSING record's lease lapses (zero for a
	// final record).
	LeaseUntil time.Time
}

// Stuck reports whether e is a PROCESSING record whose lease has lapsed:
// its worker stopped without storing an outcome, and the next retry with
// the same payload takes it over.
func (e Entry) Stuck() bool { return e.Status == StatusProcessing && e.LeaseLeft <= 0 }

// ListQuery selects records for AdminStore.List. Its zero value lists every
// live record, newest first, DefaultListLimit at a time.
type ListQuery struct {
	// Tenant, when ByTenant, keeps the records of that tenant only ("" is
	// SingleTenant's key space).
	Tenant   string
	ByTenant bool
	// Op keeps the records of one operation ("" any).
	Op string
	// Status keeps the records of one status (0 any).
	Status Status
	// Stuck keeps the PROCESSING records whose lease has lapsed.
	Stuck bool
	// MaxAge keeps records created at most this long ago (0 any).
	MaxAge time.Duration
	// MinAge keeps records created at least this long ago (0 any).
	MinAge time.Duration
	// Limit is the page size: DefaultListLimit when 0, at most
	// MaxListLimit.
	Limit int
	// Cursor continues a listing: the Next of the previous page.
	Cursor string
}

// Page limits of AdminStore.List.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// PageLimit returns q.Limit within 1..MaxListLimit (DefaultListLimit for 0).
func (q ListQuery) PageLimit() int {
	switch {
	case q.Limit <= 0:
		return DefaultListLimit
	case q.Limit > MaxListLimit:
		return MaxListLimit
	}
	return q.Limit
}

// Page is one page of AdminStore.List.
type Page struct {
	Entries []Entry
	// Next is the cursor of the next page, "" after the last one.
	Next string
}

// ForgetRequest asks AdminStore.Forget to forget one version of a record.
type ForgetRequest struct {
	Key Key
	// Token and Status are the record's as the operator looked them up
	// (Entry.Token, Entry.Status): the record is forgotten only if it still
	// holds both.
	Token  Token
	Status Status
	// Force forgets a PROCESSING record whose lease is live. Its worker
	// then fails to store its outcome (ErrLeaseLost), and a retry runs the
	// method again beside it: use it only for a worker known dead.
	Force bool
	// By names who asks (a person or a tool), for the audit line; Admin
	// refuses an empty one.
	By string
	// Reason is kept in the audit line.
	Reason string
}

// StatsQuery selects the records AdminStore.Stats counts.
type StatsQuery struct {
	// Tenant, when ByTenant, counts that tenant's records only.
	Tenant   string
	ByTenant bool
	// Op counts one operation's records only ("" every operation).
	Op string
}

// Stat is the count of one operation's records of one status.
type Stat struct {
	Op     string
	Status Status
	// Stuck marks the count of PROCESSING records whose lease has lapsed
	// (the other PROCESSING count is of live leases).
	Stuck bool
	Count int64
}

// KeyFromHex returns the key whose ID is the 64 hex digits s (Key.Hex), for
// AdminStore.Lookup and Forget; its Tenant, Op and Text are empty.
func KeyFromHex(s string) (Key, error) {
	var k Key
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(k.ID) {
		return Key{}, fmt.Errorf("idem: key ID %q: want %d hex digits", s, 2*len(k.ID))
	}
	copy(k.ID[:], b)
	return k, nil
}

// ForgetEvent reports a record forgotten through an Admin.
type ForgetEvent struct {
	Key    Key // the key as the request named it
	Token  Token
	Status Status
	Force  bool
	By     string
	Reason string
	At     time.Time // by the Admin's clock
}

// Admin wraps an AdminStore for operators: its Forget checks the request,
// writes an audit line (log/slog, level WARN, message "idem: record
// forgotten", naming who, the key's tenant, operation and hex ID, the
// token, status, force and reason) and calls the observer. Lookup, List and
// Stats are the store's. Safe for concurrent use.
type Admin struct {
	AdminStore
	log     *slog.Logger
	observe func(ForgetEvent)
	clock   Clock
}

// AdminOption configures an Admin.
type AdminOption func(*Admin)

// WithAdminLogger sets the logger of the audit lines (default
// slog.Default()).
func WithAdminLogger(l *slog.Logger) AdminOption { return func(a *Admin) { a.log = l } }

// WithForgetObserver sets a function called after every record forgotten.
func WithForgetObserver(f func(ForgetEvent)) AdminOption {
	return func(a *Admin) { a.observe = f }
}

// WithAdminClock sets the clock of ForgetEvent.At (default the system's).
func WithAdminClock(c Clock) AdminOption { return func(a *Admin) { a.clock = c } }

// NewAdmin returns an Admin over store. It returns an error wrapping
// errors.ErrUnsupported when store is nil.
func NewAdmin(store AdminStore, opts ...AdminOption) (*Admin, error) {
	if store == nil {
		return nil, fmt.Errorf("idem: NewAdmin: no store: %w", errors.ErrUnsupported)
	}
	a := &Admin{AdminStore: store, log: slog.Default()}
	for _, o := range opts {
		o(a)
	}
	return a, nil
}

// Forget checks req (a key, a token, a status and By are required),
// forgets the record through the store and, when it was forgotten, writes
// the audit line and calls the observer. A key given by its hex ID alone
// (KeyFromHex) is looked up first, so that the line and the event name the
// tenant and operation the store keeps. A refusal (ErrLeaseLive,
// ErrRecordChanged, ErrNotFound) is logged at INFO and forgets nothing.
func (a *Admin) Forget(ctx context.Context, req ForgetRequest) error {
	switch {
	case req.By == "":
		return fmt.Errorf("idem: forget %s: who asks (ForgetRequest.By) is required", req.Key.Hex())
	case req.Token == 0 || req.Status == 0:
		return fmt.Errorf("idem: forget %s: the token and status looked at (Lookup) are required", req.Key.Hex())
	}
	if req.Key.Op == "" { // named by its hex ID: the audit line names the tenant and op the store keeps
		if e, err := a.AdminStore.Lookup(ctx, req.Key); err == nil {
			req.Key.Tenant, req.Key.Op, req.Key.Text = e.Key.Tenant, e.Key.Op, e.Key.Text
		}
	}
	attrs := []slog.Attr{
		slog.String("by", req.By), slog.String("key", req.Key.Hex()), slog.String("tenant", req.Key.Tenant),
		slog.String("op", req.Key.Op), slog.Uint64("token", uint64(req.Token)), slog.String("status", req.Status.String()),
		slog.Bool("force", req.Force), slog.String("reason", req.Reason),
	}
	if err := a.AdminStore.Forget(ctx, req); err != nil {
		a.log.LogAttrs(ctx, slog.LevelInfo, "idem: forget refused", append(attrs, slog.String("error", err.Error()))...)
		return err
	}
	a.log.LogAttrs(ctx, slog.LevelWarn, "idem: record forgotten", attrs...)
	if a.observe != nil {
		var at time.Time
		if a.clock != nil {
			at = a.clock.Now()
		} else {
			at = time.Now()
		}
		a.observe(ForgetEvent{Key: req.Key, Token: req.Token, Status: req.Status, Force: req.Force, By: req.By, Reason: req.Reason, At: at})
	}
	return nil
}

// Matches reports whether e, read at now by the store's clock, passes q's
// filters (not its cursor or limit): for stores that filter in memory.
func (q ListQuery) Matches(e Entry, now time.Time) bool {
	switch {
	case q.ByTenant && e.Key.Tenant != q.Tenant,
		q.Op != "" && e.Key.Op != q.Op,
		q.Status != 0 && e.Status != q.Status,
		q.Stuck && !e.Stuck(),
		q.MaxAge > 0 && e.Created.Before(now.Add(-q.MaxAge)),
		q.MinAge > 0 && e.Created.After(now.Add(-q.MinAge)):
		return false
	}
	return true
}

// ListCursor returns the cursor of a page that ends with e, for stores that
// list newest first by (Created, Key.ID): ParseListCursor reads it back.
func ListCursor(e Entry) string {
	return fmt.Sprintf("%d.%s", e.Created.UnixNano(), e.Key.Hex())
}

// ParseListCursor reads a cursor that ListCursor made: the next page holds
// the records before (created, id) in the order (Created desc, ID desc).
func ParseListCursor(s string) (created time.Time, id [32]byte, err error) {
	var ns int64
	var h string
	if _, err := fmt.Sscanf(s, "%d.%s", &ns, &h); err != nil {
		return time.Time{}, id, fmt.Errorf("idem: list cursor %q: %w", s, err)
	}
	k, err := KeyFromHex(h)
	if err != nil {
		return time.Time{}, id, fmt.Errorf("idem: list cursor %q: %w", s, err)
	}
	return time.Unix(0, ns), k.ID, nil
}

// Before reports whether a, b being (Created, ID) pairs, a comes after b in
// a listing (newest first): a is older, or as old with a smaller ID.
func listBefore(aT time.Time, aID [32]byte, bT time.Time, bID [32]byte) bool {
	if !aT.Equal(bT) {
		return aT.Before(bT)
	}
	return string(aID[:]) < string(bID[:])
}

// PageOf sorts entries newest first, keeps those after q.Cursor and
// returns the first page of q.PageLimit() of them: for stores that list in
// memory (memstore, redisstore). entries is sorted in place.
func PageOf(q ListQuery, entries []Entry) (Page, error) {
	slices.SortFunc(entries, func(a, b Entry) int {
		switch {
		case listBefore(a.Created, a.Key.ID, b.Created, b.Key.ID):
			return 1
		case listBefore(b.Created, b.Key.ID, a.Created, a.Key.ID):
			return -1
		}
		return 0
	})
	if q.Cursor != "" {
		ct, cid, err := ParseListCursor(q.Cursor)
		if err != nil {
			return Page{}, err
		}
		i := 0
		for i < len(entries) && !listBefore(entries[i].Created, entries[i].Key.ID, ct, cid) {
			i++
		}
		entries = entries[i:]
	}
	var p Page
	if n := q.PageLimit(); len(entries) > n {
		entries = entries[:n]
		p.Next = ListCursor(entries[n-1])
	}
	p.Entries = entries
	return p, nil
}

// CountStats adds e to the counts in m, keyed as Stats reports them: for
// stores that count in memory.
func CountStats(m map[Stat]int64, e Entry) {
	m[Stat{Op: e.Key.Op, Status: e.Status, Stuck: e.Stuck()}]++
}

// SortedStats returns m's counts as Stats reports them: by operation, then
// status, live leases before lapsed ones.
func SortedStats(m map[Stat]int64) []Stat {
	out := make([]Stat, 0, len(m))
	for s, n := range m {
		s.Count = n
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Stat) int {
		if c := strings.Compare(a.Op, b.Op); c != 0 {
			return c
		}
		if a.Status != b.Status {
			return int(a.Status) - int(b.Status)
		}
		switch {
		case a.Stuck == b.Stuck:
			return 0
		case b.Stuck:
			return -1
		}
		return 1
	})
	return out
}
