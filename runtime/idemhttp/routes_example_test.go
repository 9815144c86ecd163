package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Routers need no adapter: the operation that scopes keys is the method
// and the route pattern whenever the request carries one. A Go 1.22+
// ServeMux sets r.Pattern for the handlers of its routes, and the
// middleware asks a ServeMux it wraps for the pattern; chi (v5.2.2 and
// later) sets r.Pattern to its RoutePattern() for the handlers of its
// routes, so wrap chi's handlers (r.With(mw).Post(...)), not chi itself
// (chi's Use runs before routing: the operation is then the path). One key
// sent to two paths of one route is one key reused: 422.
func Example_routePatterns() {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	mw := idemhttp.New(ex, idemhttp.SingleTenant(), idemhttp.WithObserver(func(ev idemhttp.Event) {
		if ev.Kind == idemhttp.EventConflict {
			fmt.Printf("  key reused within operation %q\n", ev.Op)
		}
	}))
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "paid order %s", r.PathValue("id"))
	})

	perRoute := http.NewServeMux() // each route wrapped: r.Pattern
	perRoute.Handle("POST /orders/{id}/pay", mw(pay))
	wholeMux := http.NewServeMux() // the mux wrapped: the mux is asked
	wholeMux.Handle("POST /invoices/{id}/pay", pay)

	for _, h := range []http.Handler{perRoute, mw(wholeMux)} {
		srv := httptest.NewServer(h)
		for _, path := range []string{"/orders/1/pay", "/orders/2/pay", "/invoices/1/pay", "/invoices/2/pay"} {
			req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader("{}"))
			req.Header.Set(idemhttp.Header, "k-"+path[1:4])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				panic(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				fmt.Printf("%s: %d %s\n", path, resp.StatusCode, strings.SplitN(string(b), ",", 2)[0])
			}
		}
		srv.Close()
	}
	// Output:
	// /orders/1/pay: 200 paid order 1
	//   key reused within operation "POST /orders/{id}/pay"
	// /orders/2/pay: 422 {"type":"https://github.com/idemgen/idemgen/blob/main/runtime/idemhttp/README.md#key-reused"
	// /invoices/1/pay: 200 paid order 1
	//   key reused within operation "POST /invoices/{id}/pay"
	// /invoices/2/pay: 422 {"type":"https://github.com/idemgen/idemgen/blob/main/runtime/idemhttp/README.md#key-reused"
}
