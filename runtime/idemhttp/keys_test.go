package idemhttp_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func testMissingKey(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201))
	w := e.do("POST", "/orders", "", "{}")
	p := wantProblem(t, w, 400, "missing-key")
	if !strings.Contains(p.Title, "missing") {
		t.Errorf("title %q", p.Title)
	}
	e.wantRuns(0)
	if n := len(e.events(idemhttp.EventKeyMissing)); n != 1 {
		t.Fatalf("%d missing-key events", n)
	}
}

func testOptionalKey(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201), idemhttp.WithOptionalKey())
	wantStatus(t, e.do("POST", "/orders", "", "{}"), 201)
	wantStatus(t, e.do("POST", "/orders", "", "{}"), 201)
	e.wantRuns(2)
	evs := e.events(idemhttp.EventKeyMissing)
	if len(evs) != 2 || evs[0].Status != 0 {
		t.Fatalf("missing-key events %+v", evs)
	}
	wantProblem(t, e.do("POST", "/orders", `"unterminated`, "{}"), 400, "invalid-key")
}

func testInvalidKey(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201))
	for _, k := range []string{`""`, `"abc`, `"a"b"`, "é", "a\x01b", strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`} {
		wantProblem(t, e.do("POST", "/orders", k, "{}"), 400, "invalid-key")
	}
	// Two header fields, and a list in one (as a proxy may combine them).
	wantProblem(t, e.do("POST", "/orders", "a", "{}", idemhttp.Header, "b"), 400, "invalid-key")
	for _, k := range []string{"key-1, key-2", `"key-1", "key-2"`, `"key-1";v=1,"key-2"`} {
		p := wantProblem(t, e.do("POST", "/orders", k, "{}"), 400, "invalid-key")
		if !strings.Contains(p.Detail, "list") {
			t.Errorf("%q: detail %q does not say it is a list", k, p.Detail)
		}
	}
	e.wantRuns(0)
	// The longest key, fresh: the stores on one server share pgstore's
	// advisory locks across tables (docs/decisions/conformance-reach.md,
	// record 6), and a fixed key would meet another subtest's call.
	key := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/orders", key+strings.Repeat("k", 255-len(key)), "{}"), 201)
}

func testKeyReused(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, statusHandler(201))
	key := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/orders?a=1", key, `{"n":1}`), 201)
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/orders?a=1", `{"n":2}`}, // body
		{"POST", "/orders?a=2", `{"n":1}`}, // query
	} { // (a path under the same route: see OperationScope)
		p := wantProblem(t, e.do(c.method, c.target, key, c.body), 422, "key-reused")
		if !strings.Contains(p.Detail, "different request") {
			t.Errorf("detail %q", p.Detail)
		}
	}
	e.wantRuns(1)
	if n := len(e.events(idemhttp.EventConflict)); n != 2 {
		t.Fatalf("%d conflict events", n)
	}
}

func testCustomFingerprint(t *testing.T, newStore newStoreFunc) {
	// Only the "amount" field counts: a client that adds a timestamp on
	// retry still gets the replay; another amount is refused.
	fp := func(r *http.Request, body []byte, h *idem.Hasher) error {
		var v struct {
			Amount int64 `json:"amount"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			return err
		}
		h.String(r.URL.Path)
		h.Int(v.Amount)
		return nil
	}
	e := newEnv(t, newStore, statusHandler(201), idemhttp.WithFingerprint(fp))
	key := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/pay", key, `{"amount":5,"ts":1}`), 201)
	wantReplayed(t, e.do("POST", "/pay", key, `{"amount":5,"ts":2}`).Header(), true)
	wantProblem(t, e.do("POST", "/pay", key, `{"amount":6,"ts":3}`), 422, "key-reused")
	wantProblem(t, e.do("POST", "/pay", key, `not json`), 400, "invalid-request")
	e.wantRuns(1)
}

// TestMissingKey checks the missing-key refusal and its event on every store (onEveryStore).
func TestMissingKey(t *testing.T) { onEveryStore(t, testMissingKey) }

// TestOptionalKey checks WithOptionalKey on every store (onEveryStore).
func TestOptionalKey(t *testing.T) { onEveryStore(t, testOptionalKey) }

// TestInvalidKey checks every malformed key form, lists among them on every store (onEveryStore).
func TestInvalidKey(t *testing.T) { onEveryStore(t, testInvalidKey) }

// TestKeyReusedWithAnotherRequest checks key-reused and its events on every store (onEveryStore).
func TestKeyReusedWithAnotherRequest(t *testing.T) { onEveryStore(t, testKeyReused) }

// TestCustomFingerprint checks WithFingerprint on every store (onEveryStore).
func TestCustomFingerprint(t *testing.T) { onEveryStore(t, testCustomFingerprint) }
