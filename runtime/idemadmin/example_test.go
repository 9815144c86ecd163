package idemadmin_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// A service mounts the handler on its admin port, behind its own
// authentication. Its authorisation hook confines each operator to the
// tenant the middleware authenticated (or lets the service's own operators
// see every tenant); forget is allowed for the operator the middleware
// named.
func ExampleNewHandler() {
	store := memstore.New()
	h, err := idemadmin.NewHandler(store,
		idemadmin.Authorize(func(r *http.Request) (idemadmin.Scope, error) {
			// Set by the service's own middleware, from what it authenticated.
			switch r.Header.Get("X-Authenticated-Role") {
			case "support":
				return idemadmin.Scope{Tenant: r.Header.Get("X-Authenticated-Tenant")}, nil
			case "sre":
				return idemadmin.Scope{AllTenants: true}, nil
			}
			return idemadmin.Scope{}, errors.New("not an operator")
		}),
		idemadmin.AllowForget(func(r *http.Request) string {
			return r.Header.Get("X-Authenticated-User")
		}))
	if err != nil {
		panic(err)
	}
	admin := http.NewServeMux()
	admin.Handle("/idem/", http.StripPrefix("/idem", h))

	srv := httptest.NewServer(admin)
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/idem/stats", nil)
	req.Header.Set("X-Authenticated-Role", "support")
	req.Header.Set("X-Authenticated-Tenant", "acme")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	fmt.Print(res.StatusCode, " ", string(b))
	// Output: 200 []
}
