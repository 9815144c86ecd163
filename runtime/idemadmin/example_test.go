package idemadmin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// A service mounts the handler on its admin port, behind its own
// authentication; forget is allowed here for the operator the middleware
// named.
func ExampleNewHandler() {
	store := memstore.New()
	h, err := idemadmin.NewHandler(store, idemadmin.AllowForget(func(r *http.Request) string {
		return r.Header.Get("X-Authenticated-User") // set by the service's own middleware
	}))
	if err != nil {
		panic(err)
	}
	admin := http.NewServeMux()
	admin.Handle("/idem/", http.StripPrefix("/idem", h))

	srv := httptest.NewServer(admin)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/idem/stats")
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	fmt.Print(res.StatusCode, " ", string(b))
	// Output: 200 []
}
