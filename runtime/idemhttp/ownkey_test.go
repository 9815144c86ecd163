package idemhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type authKey struct{}

// TestOwnClaimKeyUnchanged: the middleware's own claim has the record key
// it had before doors put their tenant in the handler's context (the hex
// IDs below were computed by the release before), for every wiring that
// worked then, so that the records stored by a running release stay
// reachable across the deploy. The handler's context carries the door's
// tenant all the same.
func TestOwnClaimKeyUnchanged(t *testing.T) {
	byAuth := idem.WithTenant(func(ctx context.Context) string { s, _ := ctx.Value(authKey{}).(string); return s })
	cases := []struct {
		name       string
		executor   idem.Option
		door       idemhttp.Option
		wantTenant string // the record key's tenant (the door's, as a key part, under SingleTenant)
		wantHex    string
	}{
		{"executor SingleTenant, door WithTenant", idem.SingleTenant(), idemhttp.WithTenant(tenantOf), "acme", "01d25488c37820a41abd83bb56f0bcec53086ada32b4319442cc96e2585e66c3"},
		{"executor SingleTenant, door SingleTenant", idem.SingleTenant(), idemhttp.SingleTenant(), "", "07bea6891a76d511d00a70023f40442c56557e104fba4e6b9d6d13be58daea61"},
		{"executor WithTenant, door WithTenant", byAuth, idemhttp.WithTenant(tenantOf), "acme", "c1224c36f1e5f24fcf28afd3c6711d94cad9048bda31ee4786fce3ce390c02cf"},
		{"executor WithTenant(empty), door WithTenant", idem.WithTenant(func(context.Context) string { return "" }), idemhttp.WithTenant(tenantOf), "acme", "01d25488c37820a41abd83bb56f0bcec53086ada32b4319442cc96e2585e66c3"},
		{"executor WithTenant, door SingleTenant", byAuth, idemhttp.SingleTenant(), "acme", "01d25488c37820a41abd83bb56f0bcec53086ada32b4319442cc96e2585e66c3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var claimed []idem.Key
			ex := idem.NewExecutor(memstore.New(), c.executor, idem.WithObserver(func(ev idem.Event) {
				if ev.Kind == idem.EventCompleted {
					claimed = append(claimed, ev.Key)
				}
			}))
			var inHandler string
			h := idemhttp.New(ex, c.door)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inHandler, _ = idem.TenantFromContext(r.Context())
				w.WriteHeader(201)
			}))
			r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
			r = r.WithContext(context.WithValue(r.Context(), authKey{}, "acme"))
			r.Header.Set("X-Tenant", "acme")
			r.Header.Set(idemhttp.Header, "k-1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 201 || len(claimed) != 1 {
				t.Fatalf("status %d, %d records", w.Code, len(claimed))
			}
			k := claimed[0]
			if k.Tenant != c.wantTenant || k.Hex() != c.wantHex {
				t.Errorf("the middleware's record is %q %s, want %q %s", k.Tenant, k.Hex(), c.wantTenant, c.wantHex)
			}
			wantDoor := ""
			if strings.Contains(c.name, "door WithTenant") {
				wantDoor = "acme"
			}
			if inHandler != wantDoor {
				t.Errorf("the handler's context names %q, want %q", inHandler, wantDoor)
			}
		})
	}
}

func tenantOf(r *http.Request) string { return r.Header.Get("X-Tenant") }

// TestUpstreamTenantConflict: a layer above the middleware that already
// named another tenant in the request's context is a second reading of the
// caller: the request is refused (403 tenant-conflict) and nothing runs.
func TestUpstreamTenantConflict(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	runs := 0
	h := idemhttp.New(ex, idemhttp.WithTenant(tenantOf))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(201)
	}))
	for _, up := range []string{"globex", "acme"} {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		r = r.WithContext(idem.ContextWithTenant(r.Context(), up))
		r.Header.Set("X-Tenant", "acme")
		r.Header.Set(idemhttp.Header, "k-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if up == "globex" {
			wantProblem(t, w, http.StatusForbidden, "tenant-conflict")
			if runs != 0 {
				t.Fatalf("the handler ran %d times under two tenants", runs)
			}
			continue
		}
		if w.Code != 201 || runs != 1 {
			t.Fatalf("the same tenant twice: %d, runs %d", w.Code, runs)
		}
	}
}
