package idemhttptest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// Orders is a service with one idempotent method, Pay, as idemgen
// generates it: the business key is the order, the fingerprint the order
// and the amount. The framework adapters' native handlers call it, with
// the context the adapter documents, for CheckTenantsApart.
type Orders struct {
	// Executor runs Pay.
	Executor *idem.Executor

	mu   sync.Mutex
	runs map[string]int // Pay's runs, by the tenant of its context
}

// Pay is what idemgen generates for
//
//	//idem:key=order ttl=1h
//	func (o *Orders) Pay(ctx context.Context, order string, amount int) (string, error)
//
// The method's receipt names the tenant of the context it runs with
// (idem.TenantFromContext): the tenant its record belongs to.
func (o *Orders) Pay(ctx context.Context, order string, amount int) (string, error) {
	return pay(ctx, o.Executor, order, amount, func(ctx context.Context) (string, error) {
		t, _ := idem.TenantFromContext(ctx)
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.runs == nil {
			o.runs = map[string]int{}
		}
		o.runs[t]++
		return fmt.Sprintf("receipt of %s for %d (run %d)", t, amount, o.runs[t]), nil
	})
}

// Runs returns how many times Pay ran, by the tenant of its context.
func (o *Orders) Runs() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]int, len(o.runs))
	for k, v := range o.runs {
		out[k] = v
	}
	return out
}

// CheckTenantsApart checks, through a framework's native handler, that the
// tenant the door names reaches the wrapped method the handler calls:
// payURL(order, amount) is the URL of a POST route, behind the adapter's
// middleware with idemhttp.WithTenant reading the X-Tenant header, whose
// handler calls o.Pay with the order and the amount and answers 200 and the
// receipt, or the error the framework's way (returned, or c.Error), for
// the adapter to answer. o's executor is single-tenant: the door's tenant
// is the only one.
//
// Two tenants pay one order with one body under different
// Idempotency-Keys: each gets its own receipt, Pay runs once for each; a
// new key replays the tenant's own receipt, marked
// Idempotent-Replayed-By: business-key; another amount is 422
// business-key-reused, and no tenant is 403 missing-tenant.
func CheckTenantsApart(t *testing.T, o *Orders, payURL func(order string, amount int) string) {
	t.Helper()
	order := "order-" + idemhttp.GenerateKey()
	send := func(tenant string, amount int) Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, payURL(order, amount), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(idemhttp.Header, idemhttp.GenerateKey())
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return Response{Status: res.StatusCode, Header: res.Header, Body: string(b)}
	}
	for range 2 {
		for _, tn := range []string{"acme", "globex"} {
			r := send(tn, 100)
			want := "receipt of " + tn + " for 100 (run 1)"
			if r.Status != 200 || r.Body != want {
				t.Fatalf("%s: %d %q, want 200 %q", tn, r.Status, r.Body, want)
			}
		}
	}
	if r := send("globex", 100); r.Header.Get(idemhttp.ReplayedByHeader) != idemhttp.ReplayedByBusinessKey {
		t.Fatalf("a payment answered by the business key: %s %q", idemhttp.ReplayedByHeader, r.Header.Get(idemhttp.ReplayedByHeader))
	}
	for _, c := range []struct {
		tenant string
		amount int
		status int
		rule   string
	}{{"acme", 200, 422, "business-key-reused"}, {"", 100, 403, "missing-tenant"}} {
		r := send(c.tenant, c.amount)
		if r.Status != c.status || r.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(r.Body, "#"+c.rule+`"`) {
			t.Fatalf("tenant %q amount %d: %d %s %q, want %d #%s", c.tenant, c.amount, r.Status, r.Header.Get("Content-Type"), r.Body, c.status, c.rule)
		}
	}
	if got := o.Runs(); len(got) != 2 || got["acme"] != 1 || got["globex"] != 1 {
		t.Fatalf("Pay ran %v, want once for acme and once for globex", got)
	}
}
