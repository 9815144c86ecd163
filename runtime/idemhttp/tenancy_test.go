package idemhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func testTenantIsolation(t *testing.T, newStore newStoreFunc) {
	tenant := func(r *http.Request) string { u, _, _ := r.BasicAuth(); return u }
	e := newTenancyEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		u, _, _ := r.BasicAuth()
		w.WriteHeader(201)
		fmt.Fprintf(w, "order for %s", u)
	}, idemhttp.WithTenant(tenant))
	key := idemhttp.GenerateKey()
	auth := func(u string) []string {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetBasicAuth(u, "pw")
		return []string{"Authorization", r.Header.Get("Authorization")}
	}
	a := e.do("POST", "/orders", key, "{}", auth("alice")...)
	b := e.do("POST", "/orders", key, "{}", auth("bob")...)
	e.wantRuns(2)
	wantReplayed(t, b.Header(), false)
	if a.Body.String() != "order for alice" || b.Body.String() != "order for bob" {
		t.Fatalf("bodies %q, %q", a.Body, b.Body)
	}
	// Bob guessing Alice's key with another body: a new request, not a 422.
	wantStatus(t, e.do("POST", "/orders", idemhttp.GenerateKey(), `{"x":1}`, auth("bob")...), 201)
	again := e.do("POST", "/orders", key, "{}", auth("alice")...)
	wantReplayed(t, again.Header(), true)
	if again.Body.String() != "order for alice" {
		t.Fatalf("alice's replay %q", again.Body)
	}
	e.wantRuns(3)
	ev := e.events(idemhttp.EventReplayed)
	if len(ev) != 1 || ev[0].Tenant != "alice" {
		t.Fatalf("replay events %+v", ev)
	}
}

// testTenantMissing: under WithTenant, a request its function names no
// tenant for is refused with 403 before anything runs or is claimed, with
// the same key and body as another client's: it neither gets that
// response nor shares a key space with other unauthenticated requests.
func testTenantMissing(t *testing.T, newStore newStoreFunc) {
	e := newTenancyEnv(t, newStore, statusHandler(201),
		idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") }))
	key := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/orders", key, "{}", "X-Account", "alice"), 201)
	for range 2 {
		wantProblem(t, e.do("POST", "/orders", key, "{}"), 403, "missing-tenant")
		wantProblem(t, e.do("POST", "/orders", idemhttp.GenerateKey(), "{}"), 403, "missing-tenant")
	}
	e.wantRuns(1)
	if ev := e.events(idemhttp.EventTenantMissing); len(ev) != 4 || ev[0].Status != 403 || ev[0].Key == "" {
		t.Fatalf("tenant_missing events %+v", ev)
	}
	if n := len(e.idemEvents(idem.EventClaimed)); n != 1 {
		t.Fatalf("%d claims, want 1 (alice's)", n)
	}
	wantReplayed(t, e.do("POST", "/orders", key, "{}", "X-Account", "alice").Header(), true)
}

// TestTenantIsolation checks two tenants under one key on every store (onEveryStore).
func TestTenantIsolation(t *testing.T) { onEveryStore(t, testTenantIsolation) }

// TestTenantMissing checks a request WithTenant names no tenant for on every store (onEveryStore).
func TestTenantMissing(t *testing.T) { onEveryStore(t, testTenantMissing) }
