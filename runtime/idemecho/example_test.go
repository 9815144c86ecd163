package idemecho_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemecho"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func ExampleNew() {
	orders := 0
	e := echo.New()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	e.Use(middleware.Recover(), idemecho.New(ex,
		// Scope keys by the authenticated caller (required: WithTenant or
		// SingleTenant).
		idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") })))
	e.POST("/orders/:customer", func(c echo.Context) error {
		if c.Param("customer") == "nobody" {
			return echo.NewHTTPError(http.StatusNotFound, "no such customer") // stored and replayed too
		}
		orders++
		return c.JSON(http.StatusCreated, map[string]int{"order": orders})
	})
	srv := httptest.NewServer(e)
	defer srv.Close()

	for _, path := range []string{"/orders/c1", "/orders/c1", "/orders/nobody", "/orders/nobody"} {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{"item":"book"}`))
		req.Header.Set("X-Account", "acct_1")
		req.Header.Set("Idempotency-Key", "key-"+path[8:])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b)
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// 404 replayed="" {"message":"no such customer"}
	// 404 replayed="true" {"message":"no such customer"}
	// orders created: 1
}
