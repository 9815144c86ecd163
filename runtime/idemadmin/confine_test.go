package idemadmin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/internal/testenv/mysqlenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/memstore"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// confineStores are the stores the confinement matrix runs on.
// keepsTenant: the store keeps each record's tenant (a lookup by hex ID
// can be confined); filters: it lists and counts by tenant.
var confineStores = []struct {
	name        string
	open        func(t *testing.T) idem.Store
	keepsTenant bool
	filters     bool
}{
	{"memstore", func(*testing.T) idem.Store { return memstore.New() }, true, true},
	{"pgstore", func(t *testing.T) idem.Store {
		pool, table := testenv.PGStoreTable(t, "idemadmin_confine_")
		return pgstore.New(pool, pgstore.WithTable(table))
	}, true, true},
	{"mysqlstore", func(t *testing.T) idem.Store {
		db, _, table := mysqlenv.StoreTable(t, "idemadmin_confine_")
		return mysqlstore.New(db, mysqlstore.WithTable(table))
	}, true, true},
	{"redisstore", func(t *testing.T) idem.Store {
		rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
		t.Cleanup(func() { _ = rc.Close() })
		return redisstore.New(rc, redisstore.WithPrefix("idemadmin-confine-"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	}, false, false},
}

// world is two tenants' records on one store and an operator confined to
// acme: acme's paid order-1 and stuck order-3; globex's paid order-1 (same
// parts as acme's), paid order-2 and stuck order-3.
type world struct {
	t                    *testing.T
	store                idem.Store
	srv                  *httptest.Server
	keepsTenant, filters bool
	acme, acmeStuck      idem.Key
	globex               []idem.Key // paid order-1, paid order-2, stuck order-3
	missing              idem.Key   // never claimed
}

const op = "billing.Charge"

// answer is one response: its status and body.
type answer struct {
	code int
	body string
}

func (w *world) do(method, path, body string) answer {
	w.t.Helper()
	req, err := http.NewRequest(method, w.srv.URL+"/admin"+path, strings.NewReader(body))
	require.NoError(w.t, err)
	req.Header.Set("X-Tenant", "acme")
	req.Header.Set("X-Operator", "alice")
	res, err := http.DefaultClient.Do(req)
	require.NoError(w.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(w.t, err)
	return answer{res.StatusCode, string(b)}
}

// leaksNothing asserts that a shows nothing of globex's: no payload, no
// key, no tenant name.
func (w *world) leaksNothing(a answer, what string) {
	w.t.Helper()
	assert.NotContains(w.t, a.body, "globex", what)
	for _, k := range w.globex {
		assert.NotContains(w.t, a.body, k.Hex(), what)
	}
}

// likeMissing asserts that the answer for globex's key k is the answer
// for a key never claimed, but for the key's hex ID the request named.
func (w *world) likeMissing(got answer, k idem.Key, missing answer, what string) {
	w.t.Helper()
	assert.Equal(w.t, http.StatusNotFound, got.code, what)
	assert.Equal(w.t, strings.ReplaceAll(missing.body, w.missing.Hex(), "KEY"), strings.ReplaceAll(got.body, k.Hex(), "KEY"), what)
	assert.NotContains(w.t, got.body, "globex-", what)
}

// intact asserts that globex's records are all there, as they were.
func (w *world) intact() {
	w.t.Helper()
	for i, k := range w.globex {
		e, err := w.store.(idem.AdminStore).Lookup(context.Background(), k)
		require.NoError(w.t, err, "globex's record %d is gone", i)
		assert.Equal(w.t, idem.Token(100+i), e.Token)
	}
}

func forgetBody(tok int, status string) string {
	return `{"token":"` + strconv.Itoa(tok) + `","status":"` + status + `","force":true,"reason":"test"}`
}

// routeCases is, for every route of the handler, what an operator confined
// to acme tries against globex's records, and what acme's own records
// answer. A route of idemadmin.Routes() without a case fails the test.
var routeCases = map[string]func(w *world){
	"GET /records/{key}": func(w *world) {
		missing := w.do("GET", "/records/"+w.missing.Hex(), "")
		for _, k := range w.globex {
			w.likeMissing(w.do("GET", "/records/"+k.Hex(), ""), k, missing, "another tenant's record by hex")
		}
		own := w.do("GET", "/records/"+w.acme.Hex(), "")
		if w.keepsTenant {
			assert.Equal(w.t, http.StatusOK, own.code, own.body)
			assert.Contains(w.t, own.body, "acme-1")
		} else { // the store cannot show the record is acme's: as absent
			w.likeMissing(own, w.acme, missing, "a record whose store keeps no tenant, by hex")
		}
	},
	"GET /lookup": func(w *world) {
		a := w.do("GET", "/lookup?tenant=globex&op="+op+"&part=order-1", "")
		assert.Equal(w.t, http.StatusForbidden, a.code, a.body)
		assert.Contains(w.t, a.body, `"other-tenant"`)
		w.leaksNothing(a, "tenant=globex")
		missing := w.do("GET", "/lookup?op="+op+"&part=never", "")
		assert.Equal(w.t, http.StatusNotFound, missing.code, missing.body)
		a = w.do("GET", "/lookup?op="+op+"&part=order-2", "") // globex has an order-2, acme none
		assert.Equal(w.t, http.StatusNotFound, a.code, a.body)
		w.leaksNothing(a, "globex's parts without a tenant")
		for _, path := range []string{"/lookup?op=" + op + "&part=order-1", "/lookup?tenant=acme&op=" + op + "&part=order-1"} {
			own := w.do("GET", path, "")
			assert.Equal(w.t, http.StatusOK, own.code, own.body)
			assert.Contains(w.t, own.body, "acme-1", "acme's own record by parts, on every store")
			w.leaksNothing(own, path)
		}
	},
	"GET /records": func(w *world) { w.listing("/records") },
	"GET /stuck":   func(w *world) { w.listing("/stuck") },
	"GET /stats": func(w *world) {
		a := w.do("GET", "/stats?tenant=globex", "")
		assert.Equal(w.t, http.StatusForbidden, a.code, a.body)
		own := w.do("GET", "/stats", "")
		w.leaksNothing(own, "stats")
		if !w.filters {
			assert.Equal(w.t, http.StatusBadRequest, own.code, own.body)
			return
		}
		require.Equal(w.t, http.StatusOK, own.code, own.body)
		assert.JSONEq(w.t, `[{"op":"billing.Charge","status":"PROCESSING","stuck":true,"count":1},
			{"op":"billing.Charge","status":"SUCCEEDED","count":1}]`, own.body, "acme's two records only")
	},
	"POST /records/{key}/forget": func(w *world) {
		missing := w.do("POST", "/records/"+w.missing.Hex()+"/forget", forgetBody(100, "SUCCEEDED"))
		assert.Contains(w.t, missing.body, `"not-found"`)
		for i, k := range w.globex {
			status := "SUCCEEDED"
			if i == 2 {
				status = "PROCESSING"
			}
			w.likeMissing(w.do("POST", "/records/"+k.Hex()+"/forget", forgetBody(100+i, status)), k, missing,
				"forget another tenant's record with its right token and status")
		}
		w.intact()
		own := w.do("POST", "/records/"+w.acme.Hex()+"/forget", forgetBody(1, "SUCCEEDED"))
		if w.keepsTenant {
			assert.Equal(w.t, http.StatusOK, own.code, own.body)
		} else {
			w.likeMissing(own, w.acme, missing, "forget by hex on a store that keeps no tenant")
		}
	},
}

// listing: a confined listing shows acme's records only; tenant=globex is
// refused before the store is asked.
func (w *world) listing(path string) {
	a := w.do("GET", path+"?tenant=globex", "")
	assert.Equal(w.t, http.StatusForbidden, a.code, a.body)
	w.leaksNothing(a, path+"?tenant=globex")
	queries := []string{"", "?op=" + op, "?tenant=acme", "?limit=1000"}
	if path == "/records" {
		queries = append(queries, "?status=SUCCEEDED")
	}
	for _, q := range queries {
		own := w.do("GET", path+q, "")
		w.leaksNothing(own, path+q)
		if !w.filters {
			assert.Equal(w.t, http.StatusBadRequest, own.code, own.body)
			continue
		}
		require.Equal(w.t, http.StatusOK, own.code, own.body)
		want := w.acmeStuck.Hex()
		if strings.Contains(q, "SUCCEEDED") {
			want = w.acme.Hex()
		}
		assert.Contains(w.t, own.body, want, path+q)
	}
}

// TestConfinedEveryRoute: an operator confined to one tenant reaches no
// other tenant's record on any route of the handler, by hex or by parts,
// read or forget, list or count, on every store; the routes are those of
// the handler's own table, so a new route fails here until it has a case.
func TestConfinedEveryRoute(t *testing.T) {
	for _, sc := range confineStores {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			w := &world{t: t, store: store, keepsTenant: sc.keepsTenant, filters: sc.filters}
			w.acme = record2(t, store, "acme", 1, `{"secret":"acme-1"}`, "order-1")
			w.acmeStuck = stuck(t, store, "acme", 2, "order-3")
			w.globex = []idem.Key{
				record2(t, store, "globex", 100, `{"secret":"globex-1"}`, "order-1"),
				record2(t, store, "globex", 101, `{"secret":"globex-2"}`, "order-2"),
				stuck(t, store, "globex", 102, "order-3"),
			}
			var err error
			w.missing, err = idem.NewKey("globex", op, "never")
			require.NoError(t, err)

			h, err := idemadmin.NewHandler(store, idemadmin.AllowForget(byOperator), idemadmin.Authorize(byTenantHeader))
			require.NoError(t, err)
			mux := http.NewServeMux()
			mux.Handle("/admin/", http.StripPrefix("/admin", h))
			w.srv = httptest.NewServer(mux)
			t.Cleanup(w.srv.Close)

			routes := idemadmin.Routes()
			require.NotEmpty(t, routes)
			for _, rt := range routes {
				name := rt.Method + " " + rt.Path
				c, ok := routeCases[name]
				if !ok {
					t.Errorf("route %s has no confinement case in routeCases: add what a confined operator tries there", name)
					continue
				}
				t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
					w.t = t
					c(w)
					w.intact()
				})
			}
		})
	}
}

// byTenantHeader is the scope the test's middleware authenticated.
func byTenantHeader(r *http.Request) (idemadmin.Scope, error) {
	switch t := r.Header.Get("X-Tenant"); t {
	case "":
		return idemadmin.Scope{}, errors.New("no tenant")
	case "*":
		return idemadmin.Scope{AllTenants: true}, nil
	default:
		return idemadmin.Scope{Tenant: t}, nil
	}
}

// record2 claims and completes tenant's key op/part with body and token.
func record2(t *testing.T, store idem.Store, tenant string, tok idem.Token, body string, parts ...string) idem.Key {
	k, err := idem.NewKey(tenant, op, parts...)
	require.NoError(t, err)
	ctx := context.Background()
	c, err := store.Claim(ctx, idem.ClaimRequest{Key: k, Token: tok, Lease: time.Minute, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, c.Claimed)
	require.NoError(t, store.Complete(ctx, k, tok, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(body)}, time.Hour))
	return k
}

// stuck claims tenant's key with a lease that lapses at once, and waits
// (a hang guard, not a timing) until the store sees it lapsed.
func stuck(t *testing.T, store idem.Store, tenant string, tok idem.Token, parts ...string) idem.Key {
	k, err := idem.NewKey(tenant, op, parts...)
	require.NoError(t, err)
	ctx := context.Background()
	c, err := store.Claim(ctx, idem.ClaimRequest{Key: k, Token: tok, Lease: time.Millisecond, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, c.Claimed)
	require.Eventually(t, func() bool {
		e, err := store.(idem.AdminStore).Lookup(ctx, k)
		return err == nil && e.Stuck()
	}, 30*time.Second, 5*time.Millisecond)
	return k
}

// TestEveryRouteAsksTheHook: on every route of the table, a request the
// hook refuses, or gives no tenant, is 403 and reaches no record.
func TestEveryRouteAsksTheHook(t *testing.T) {
	store := memstore.New()
	k := record2(t, store, "acme", 1, `{"secret":"acme-1"}`, "order-1")
	calls := 0
	h, err := idemadmin.NewHandler(store, idemadmin.AllowForget(byOperator), idemadmin.Authorize(func(r *http.Request) (idemadmin.Scope, error) {
		calls++
		if r.Header.Get("X-Hook") == "empty" {
			return idemadmin.Scope{}, nil
		}
		if r.Header.Get("X-Hook") == "both" {
			return idemadmin.Scope{Tenant: "acme", AllTenants: true}, nil
		}
		return idemadmin.Scope{}, errors.New("no credentials")
	}))
	require.NoError(t, err)
	for _, rt := range idemadmin.Routes() {
		for _, hook := range []string{"error", "empty", "both"} {
			path := strings.ReplaceAll(rt.Path, "{key}", k.Hex()) + "?tenant=acme&op=" + op + "&part=order-1"
			req := httptest.NewRequest(rt.Method, path, strings.NewReader(forgetBody(1, "SUCCEEDED")))
			req.Header.Set("X-Hook", hook)
			req.Header.Set("X-Operator", "alice")
			rec := httptest.NewRecorder()
			before := calls
			h.ServeHTTP(rec, req)
			assert.Equal(t, before+1, calls, "%s %s asks the hook", rt.Method, rt.Path)
			assert.Equal(t, http.StatusForbidden, rec.Code, "%s %s, hook %s: %s", rt.Method, rt.Path, hook, rec.Body)
			assert.Contains(t, rec.Body.String(), `"unauthorised"`)
			assert.NotContains(t, rec.Body.String(), "acme-1")
		}
	}
	_, err = store.Lookup(context.Background(), k)
	assert.NoError(t, err, "nothing forgotten")
}

// TestNewHandlerNeedsAHook: without an authorisation hook NewHandler
// panics naming the rule; with both it panics too. An explicit
// UnauthenticatedAllTenants serves every tenant.
func TestNewHandlerNeedsAHook(t *testing.T) {
	store := memstore.New()
	assert.PanicsWithValue(t, "idemadmin: NewHandler: an authorisation hook is required: idemadmin.Authorize(f), whose f names the tenant each request may reach "+
		"(or every tenant), or idemadmin.UnauthenticatedAllTenants() to serve every tenant's records to whoever reaches the handler",
		func() { _, _ = idemadmin.NewHandler(store, idemadmin.AllowForget(byOperator)) })
	assert.Panics(t, func() {
		_, _ = idemadmin.NewHandler(store, idemadmin.Authorize(byTenantHeader), idemadmin.UnauthenticatedAllTenants())
	})
	k := record2(t, store, "globex", 1, `{"secret":"globex-1"}`, "order-1")
	for name, opt := range map[string]idemadmin.Option{
		"unauthenticated":    idemadmin.UnauthenticatedAllTenants(),
		"scope: all tenants": idemadmin.Authorize(func(*http.Request) (idemadmin.Scope, error) { return idemadmin.Scope{AllTenants: true}, nil }),
	} {
		h, err := idemadmin.NewHandler(store, opt)
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/records/"+k.Hex(), nil))
		assert.Equal(t, http.StatusOK, rec.Code, name)
		assert.Contains(t, rec.Body.String(), "globex-1", name)
	}
}

// TestConfine: Confine refuses an empty tenant and a nil store; a
// confined store's errors are the same for an absent record and another
// tenant's.
func TestConfine(t *testing.T) {
	store := memstore.New()
	assert.Panics(t, func() { idemadmin.Confine(store, "") })
	assert.Panics(t, func() { idemadmin.Confine(nil, "acme") })
	g := record2(t, store, "globex", 7, `"x"`, "order-1")
	c := idemadmin.Confine(store, "acme")
	ctx := context.Background()
	_, err := c.Lookup(ctx, g)
	require.ErrorIs(t, err, idem.ErrNotFound)
	absent, _ := idem.NewKey("globex", op, "none")
	_, err2 := c.Lookup(ctx, absent)
	assert.Equal(t, strings.ReplaceAll(err2.Error(), absent.Hex(), "K"), strings.ReplaceAll(err.Error(), g.Hex(), "K"))
	require.ErrorIs(t, c.Forget(ctx, idem.ForgetRequest{Key: g, Token: 7, Status: idem.StatusSucceeded, Force: true, By: "x"}), idem.ErrNotFound)
	_, err = c.List(ctx, idem.ListQuery{Tenant: "globex", ByTenant: true})
	assert.ErrorIs(t, err, idemadmin.ErrOtherTenant)
	_, err = c.Stats(ctx, idem.StatsQuery{Tenant: "globex", ByTenant: true})
	assert.ErrorIs(t, err, idemadmin.ErrOtherTenant)
	p, err := c.List(ctx, idem.ListQuery{})
	require.NoError(t, err)
	assert.Empty(t, p.Entries)
	_, err = store.Lookup(ctx, g)
	assert.NoError(t, err)
}
