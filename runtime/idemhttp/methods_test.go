package idemhttp_test

import (
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func testOtherMethods(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(200))
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		wantStatus(t, e.do(m, "/orders", "", ""), 200)
	}
	key := idemhttp.GenerateKey()
	e.do("GET", "/orders", key, "")
	wantReplayed(t, e.do("GET", "/orders", key, "").Header(), false)
	e.wantRuns(5)
	if len(e.evs) != 0 {
		t.Fatalf("events for other methods: %+v", e.evs)
	}
	e2 := newEnv(t, newStore, statusHandler(200), idemhttp.WithMethods("PUT"))
	wantStatus(t, e2.do("POST", "/orders", "", ""), 200)
	wantProblem(t, e2.do("PUT", "/orders", "", ""), 400, "missing-key")
}

// TestOtherMethodsPassThrough checks the methods the middleware passes through, and WithMethods on every store (onEveryStore).
func TestOtherMethodsPassThrough(t *testing.T) { onEveryStore(t, testOtherMethods) }
