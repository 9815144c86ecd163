package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/idemgen/idemgen/cmd/idemgateway/gateway"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// Running the gateway in process in front of a backend that charges on
// every POST: the retry with the same key is replayed, and the backend
// charges once.
func ExampleRun() {
	var charges atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d", charges.Add(1))
	}))
	defer backend.Close()

	ctx, stop := context.WithCancel(context.Background())
	addr, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- gateway.Run(ctx, []string{"-listen", "127.0.0.1:0", "-upstream", backend.URL, "-store", "memory",
			"-routes", "POST /charges", "-tenant-header", "X-Account", "-log-level", "warn"},
			func(string) string { return "" }, io.Discard, func(a string) { addr <- a })
	}()
	base := "http://" + <-addr
	for range 2 {
		req, _ := http.NewRequest("POST", base+"/charges", strings.NewReader(`{"amount":100}`))
		req.Header.Set(idemhttp.Header, "order-42-payment")
		req.Header.Set("X-Account", "acct_1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get(idemhttp.ReplayedHeader) == "true")
	}
	stop() // as SIGTERM: graceful shutdown
	fmt.Println("shutdown:", <-done, "charges:", charges.Load())
	// Output:
	// 201 charge 1 replayed: false
	// 201 charge 1 replayed: true
	// shutdown: <nil> charges: 1
}
