package idemctl_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

// httpStores are the real stores TestHTTPRecord stores through idemhttp:
// the store and idemctl's global flags for it.
var httpStores = []struct {
	name string
	open func(t *testing.T) (idem.Store, []string)
}{
	{"postgres", func(t *testing.T) (idem.Store, []string) {
		pool, table := testenv.PGStoreTable(t, "idemctl_http_")
		return pgstore.New(pool, pgstore.WithTable(table)), []string{"--dsn", testenv.PostgresDSN(t), "--table", table}
	}},
	{"redis", func(t *testing.T) (idem.Store, []string) {
		addr := testenv.RedisAddr(t)
		rc := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rc.Close() })
		prefix := "idemctl-http-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
		return redisstore.New(rc, redisstore.WithPrefix(prefix)), []string{"--dsn", "redis://" + addr, "--prefix", prefix}
	}},
}

// httpWirings are the ways a service puts idemhttp in front of its
// executor: each builds the key of a request differently, and idemctl
// finds the record of each from the tenant, the route and the
// Idempotency-Key.
var httpWirings = []struct {
	name string
	wire func(store idem.Store, next http.Handler) http.Handler
}{
	{"single-tenant executor, tenant-scoped middleware (the README's)", func(store idem.Store, next http.Handler) http.Handler {
		return idemhttp.New(idem.NewExecutor(store, idem.SingleTenant()), idemhttp.WithTenant(byHeader))(next)
	}},
	{"the door's tenant in the context", func(store idem.Store, next http.Handler) http.Handler {
		mw := idemhttp.New(idem.NewExecutor(store, idem.SingleTenant()), idemhttp.WithTenant(byHeader))(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mw.ServeHTTP(w, r.WithContext(idem.ContextWithTenant(r.Context(), byHeader(r))))
		})
	}},
	{"tenant-scoped executor", func(store idem.Store, next http.Handler) http.Handler {
		ex := idem.NewExecutor(store, idem.WithTenant(func(ctx context.Context) string {
			t, _ := idem.TenantFromContext(ctx)
			return t
		}))
		mw := idemhttp.New(ex, idemhttp.WithTenant(byHeader))(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mw.ServeHTTP(w, r.WithContext(idem.ContextWithTenant(r.Context(), byHeader(r))))
		})
	}},
}

func byHeader(r *http.Request) string { return r.Header.Get("X-Tenant") }

// TestHTTPRecord: idemctl get finds the record idemhttp stored for a
// request from what an operator sees (the tenant, the route, the
// Idempotency-Key, bare or quoted), with its flags before or after the
// command, under every wiring; and --tenant confines get and forget by hex
// ID, as for a record that does not exist.
func TestHTTPRecord(t *testing.T) {
	for _, st := range httpStores {
		for i, wiring := range httpWirings {
			t.Run(st.name+"/"+wiring.name, func(t *testing.T) {
				store, base := st.open(t)
				mux := http.NewServeMux()
				mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"charge":"%s-%d"}`, byHeader(r), i)
				})
				srv := httptest.NewServer(wiring.wire(store, mux))
				t.Cleanup(srv.Close)
				key := "k1-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				for _, tenant := range []string{"acme", "globex"} {
					req, err := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(`{"amount":1200}`))
					require.NoError(t, err)
					req.Header.Set("X-Tenant", tenant)
					req.Header.Set("Idempotency-Key", key)
					res, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					_ = res.Body.Close()
					require.Equal(t, http.StatusOK, res.StatusCode)
				}

				got := map[string]idemadmin.EntryView{}
				for _, tenant := range []string{"acme", "globex"} {
					for _, args := range [][]string{
						append(append([]string{}, base...), "--tenant", tenant, "--json", "get", "--op", "POST /charges", key),
						append([]string{"get", key, "--op", "POST /charges", "--tenant", tenant, "--json"}, base...),
						append([]string{"get", `"` + key + `"`, "--http", "--op", "POST /charges", "--json", "--tenant", tenant}, base...),
					} {
						code, out, errw := run(t, args...)
						require.Equal(t, 0, code, "%v: %s", args, errw)
						var v idemadmin.EntryView
						require.NoError(t, json.Unmarshal([]byte(out), &v), out)
						assert.Equal(t, "SUCCEEDED", v.Status)
						assert.Equal(t, tenant, v.Tenant)
						assert.Equal(t, "POST /charges", v.Op)
						if prev, ok := got[tenant]; ok {
							assert.Equal(t, prev.Key, v.Key, "%v", args)
						}
						got[tenant] = v
					}
				}
				acme, globex := got["acme"], got["globex"]
				require.NotEqual(t, acme.Key, globex.Key, "one record per tenant")
				ak, err := idem.KeyFromHex(acme.Key)
				require.NoError(t, err)
				direct, err := store.(idem.AdminStore).Lookup(context.Background(), ak)
				require.NoError(t, err)
				assert.Equal(t, acme.Token, direct.Token)

				// Confined by --tenant: globex's operator reads and forgets none of acme's by its hex ID.
				code, _, errw := run(t, append(base, "--tenant", "globex", "get", acme.Key)...)
				assert.Equal(t, 1, code)
				assert.Contains(t, errw, "no live record under this key")
				assert.NotContains(t, errw, "acme")
				code, _, errw = run(t, append(base, "forget", acme.Key, "--tenant", "globex", "--token", strconv.FormatUint(uint64(acme.Token), 10), "--status", "SUCCEEDED", "--force", "--by", "mallory")...)
				assert.Equal(t, 1, code)
				assert.Contains(t, errw, "no live record under this key")
				after, err := store.(idem.AdminStore).Lookup(context.Background(), ak)
				require.NoError(t, err, "acme's record is still there")
				assert.Equal(t, acme.Token, after.Token)
			})
		}
	}
}

// TestFlagsAfterCommand: every global flag works after the command as well
// as before it.
func TestFlagsAfterCommand(t *testing.T) {
	pool, table := testenv.PGStoreTable(t, "idemctl_")
	s := pgstore.New(pool, pgstore.WithTable(table))
	k := claim(t, s, "acme", "billing.Charge", 11, `{"ok":1}`, "order-7")
	dsn := testenv.PostgresDSN(t)
	for _, args := range [][]string{
		{"--dsn", dsn, "--table", table, "--json", "get", k.Hex()},
		{"get", k.Hex(), "--json", "--dsn", dsn, "--table", table},
		{"--dsn", dsn, "get", "--table", table, k.Hex(), "--json"},
		{"get", "--json", k.Hex(), "--table=" + table, "--dsn=" + dsn, "--tenant", "acme"},
	} {
		code, out, errw := run(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, errw)
		var v idemadmin.EntryView
		require.NoError(t, json.Unmarshal([]byte(out), &v), "%v: %s", args, out)
		assert.Equal(t, k.Hex(), v.Key)
	}
	for _, cmd := range [][]string{{"list"}, {"stuck"}, {"stats"}} {
		code, out, errw := run(t, append(cmd, "--dsn", dsn, "--table", table, "--json", "--tenant", "acme")...)
		require.Equal(t, 0, code, "%v: %s", cmd, errw)
		assert.True(t, json.Valid([]byte(out)), "%v: %s", cmd, out)
	}
	code, out, errw := run(t, "list", "--dsn", dsn, "--table", table, "--tenant", "globex", "--json")
	require.Equal(t, 0, code, errw)
	assert.NotContains(t, out, k.Hex(), "confined to globex: none of acme's")
}
