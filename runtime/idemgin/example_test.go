package idemgin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemgin"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func ExampleNew() {
	gin.SetMode(gin.ReleaseMode)
	orders := 0
	r := gin.New()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	r.Use(gin.Recovery(), idemgin.New(ex,
		// Scope keys by the authenticated caller (required: WithTenant or
		// SingleTenant).
		idemhttp.WithTenant(func(r *http.Request) string { return r.Header.Get("X-Account") })))
	r.POST("/orders", func(c *gin.Context) {
		orders++
		c.JSON(http.StatusCreated, gin.H{"order": orders})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for _, body := range []string{`{"item":"book"}`, `{"item":"book"}`, `{"item":"pen"}`} {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("X-Account", "acct_1")
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.SplitN(string(b), ",", 2)[0])
	}
	fmt.Println("orders created:", orders)
	// Output:
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// 422 replayed="" {"type":"https://github.com/idemgen/idemgen/blob/main/runtime/idemhttp/README.md#key-reused"
	// orders created: 1
}
