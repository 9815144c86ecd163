package idemadmin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	"github.com/idemgen/idemgen/runtime/mysqlstore"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

type client struct {
	t   *testing.T
	srv *httptest.Server
}

func (c client) do(method, path, body string, into any) int {
	c.t.Helper()
	req, err := http.NewRequest(method, c.srv.URL+path, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("X-Operator", "alice")
	res, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	assert.Equal(c.t, "application/json", res.Header.Get("Content-Type"))
	if into != nil {
		require.NoError(c.t, json.Unmarshal(b, into), "%s", b)
	}
	return res.StatusCode
}

// mount serves store's records under /admin/, as a service mounts it,
// to every request (UnauthenticatedAllTenants; confinement is
// confine_test.go's).
func mount(t *testing.T, store idem.Store, opts ...idemadmin.Option) client {
	h, err := idemadmin.NewHandler(store, append(opts, idemadmin.UnauthenticatedAllTenants())...)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/admin/", http.StripPrefix("/admin", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return client{t: t, srv: srv}
}

func byOperator(r *http.Request) string { return r.Header.Get("X-Operator") }

// record claims and completes the key tenant/op/parts with body on store.
func record(t *testing.T, store idem.Store, tenant, op, body string, parts ...string) idem.Key {
	k, err := idem.NewKey(tenant, op, parts...)
	require.NoError(t, err)
	ctx := context.Background()
	c, err := store.Claim(ctx, idem.ClaimRequest{Key: k, Token: 42, Lease: time.Minute, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, c.Claimed)
	if body != "" {
		require.NoError(t, store.Complete(ctx, k, 42, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(body)}, time.Hour))
	}
	return k
}

// TestHandlerPostgres serves a PostgreSQL store's records: see sqlHandler.
func TestHandlerPostgres(t *testing.T) {
	pool, table := testenv.PGStoreTable(t, "idemadmin_")
	sqlHandler(t, pgstore.New(pool, pgstore.WithTable(table)))
}

// TestHandlerMySQL serves a MySQL (MariaDB) store's records, in lease and
// transactional mode: see sqlHandler.
func TestHandlerMySQL(t *testing.T) {
	for _, mode := range []string{"lease", "tx"} {
		t.Run(mode, func(t *testing.T) {
			db, _, table := mysqlenv.StoreTable(t, "idemadmin_")
			if mode == "tx" {
				sqlHandler(t, mysqlstore.NewTx(db, mysqlstore.WithTable(table)))
				return
			}
			sqlHandler(t, mysqlstore.New(db, mysqlstore.WithTable(table)))
		})
	}
}

// sqlHandler serves a SQL store's records: lookup by the caller's key and
// by hex ID, list, stuck, stats, and forget (refused without AllowForget,
// fenced by the token, audited).
func sqlHandler(t *testing.T, store idem.Store) {
	paid := record(t, store, "acme", "billing.Charge", `{"id":"ch_1","amount":1200}`, "order-7")
	record(t, store, "acme", "billing.Charge", "", "order-8") // in progress

	ro := mount(t, store)
	var e idemadmin.EntryView
	require.Equal(t, http.StatusOK, ro.do("GET", "/admin/lookup?tenant=acme&op=billing.Charge&part=order-7", "", &e))
	assert.Equal(t, paid.Hex(), e.Key)
	assert.Equal(t, "SUCCEEDED", e.Status)
	assert.Equal(t, "order-7", e.Text)
	assert.Equal(t, "acme", e.Tenant)
	assert.JSONEq(t, `{"id":"ch_1","amount":1200}`, string(e.Outcome.Body))
	assert.Equal(t, idem.Token(42), e.Token)
	require.Equal(t, http.StatusOK, ro.do("GET", "/admin/records/"+paid.Hex(), "", &e))
	assert.Equal(t, "SUCCEEDED", e.Status)

	var fail map[string]string
	assert.Equal(t, http.StatusNotFound, ro.do("GET", "/admin/lookup?tenant=acme&op=billing.Charge&part=order-9", "", &fail))
	assert.Contains(t, fail["error"], "no live record")
	assert.Equal(t, http.StatusBadRequest, ro.do("GET", "/admin/records/xyz", "", &fail))

	var p idemadmin.PageView
	require.Equal(t, http.StatusOK, ro.do("GET", "/admin/records?op=billing.Charge&tenant=acme", "", &p))
	require.Len(t, p.Entries, 2)
	assert.Equal(t, "PROCESSING", p.Entries[0].Status, "newest first")
	require.Equal(t, http.StatusOK, ro.do("GET", "/admin/records?op=billing.Charge&status=succeeded", "", &p))
	require.Len(t, p.Entries, 1)
	require.Equal(t, http.StatusOK, ro.do("GET", "/admin/stuck?op=billing.Charge", "", &p))
	assert.Empty(t, p.Entries, "a live lease is not stuck")

	var st []idemadmin.StatView
	require.Equal(t, http.StatusOK, ro.do("GET", "/admin/stats?op=billing.Charge", "", &st))
	assert.Equal(t, []idemadmin.StatView{
		{Op: "billing.Charge", Status: "PROCESSING", Count: 1},
		{Op: "billing.Charge", Status: "SUCCEEDED", Count: 1},
	}, st)

	body := `{"token":"42","status":"SUCCEEDED","reason":"ticket 311: recorded before the refund"}`
	assert.Equal(t, http.StatusForbidden, ro.do("POST", "/admin/records/"+paid.Hex()+"/forget", body, &fail), "read-only by default")

	var audit bytes.Buffer
	var events []idem.ForgetEvent
	rw := mount(t, store, idemadmin.AllowForget(byOperator), idemadmin.WithAdminOptions(
		idem.WithAdminLogger(slog.New(slog.NewTextHandler(&audit, nil))),
		idem.WithForgetObserver(func(ev idem.ForgetEvent) { events = append(events, ev) })))
	assert.Equal(t, http.StatusConflict, rw.do("POST", "/admin/records/"+paid.Hex()+"/forget",
		`{"token":"43","status":"SUCCEEDED"}`, &fail), "another version than the one looked at")
	assert.Contains(t, fail["error"], "changed since it was looked at")
	var ok map[string]string
	require.Equal(t, http.StatusOK, rw.do("POST", "/admin/records/"+paid.Hex()+"/forget", body, &ok))
	assert.Equal(t, paid.Hex(), ok["forgotten"])
	assert.Equal(t, http.StatusNotFound, rw.do("GET", "/admin/records/"+paid.Hex(), "", &fail))
	assert.Contains(t, audit.String(), `msg="idem: record forgotten" by=alice key=`+paid.Hex())
	assert.Contains(t, audit.String(), `reason="ticket 311: recorded before the refund"`)
	require.Len(t, events, 1)
	assert.Equal(t, "alice", events[0].By)

	// The forgotten key runs again.
	c, err := store.Claim(context.Background(), idem.ClaimRequest{Key: paid, Token: 7, Lease: time.Minute, TTL: time.Hour})
	require.NoError(t, err)
	assert.True(t, c.Claimed)
}

// TestHandlerRedis serves a Redis store: lookup and forget by key; a
// filter by operation is a 400 (records keep none), by status works.
func TestHandlerRedis(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rc.Close() })
	store := redisstore.New(rc, redisstore.WithPrefix("idemadmin-test:"))
	k := record(t, store, "acme", "billing.Charge", `"done"`, "order-"+time.Now().Format(time.RFC3339Nano))
	rw := mount(t, store, idemadmin.AllowForget(byOperator))
	var e idemadmin.EntryView
	require.Equal(t, http.StatusOK, rw.do("GET", "/admin/records/"+k.Hex(), "", &e))
	assert.Equal(t, "SUCCEEDED", e.Status)
	assert.Nil(t, e.Created, "redisstore keeps no creation time")
	var fail map[string]string
	assert.Equal(t, http.StatusBadRequest, rw.do("GET", "/admin/records?op=billing.Charge", "", &fail))
	assert.Contains(t, fail["error"], "unsupported")
	var p idemadmin.PageView
	require.Equal(t, http.StatusOK, rw.do("GET", "/admin/records?status=SUCCEEDED&limit=5", "", &p))
	assert.LessOrEqual(t, len(p.Entries), 5)
	var ok map[string]string
	require.Equal(t, http.StatusOK, rw.do("POST", "/admin/records/"+k.Hex()+"/forget", `{"token":"42","status":"SUCCEEDED"}`, &ok))
	assert.Equal(t, http.StatusNotFound, rw.do("GET", "/admin/records/"+k.Hex(), "", &fail))
}
