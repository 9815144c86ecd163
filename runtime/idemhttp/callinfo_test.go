package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestReplayedHeaderIsCallInfo: Idempotent-Replayed is set on exactly the
// responses for which idem.CallInfo.Replayed is true, read by a handler in
// front of the middleware: a first request, its retry, a request with
// another key, and the same key with another body (a conflict).
func TestReplayedHeaderIsCallInfo(t *testing.T) {
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	mw := idemhttp.New(ex, idemhttp.SingleTenant())
	inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for i, c := range []struct {
		key, body string
		replayed  bool
	}{
		{"k1", "{}", false},
		{"k1", "{}", true},
		{"k2", "{}", false},
		{"k1", `{"other":1}`, false},
		{"k2", "{}", true},
	} {
		req := httptest.NewRequest("POST", "/orders", strings.NewReader(c.body))
		req.Header.Set(idemhttp.Header, c.key)
		ctx, info := idem.WithCallInfo(req.Context())
		w := httptest.NewRecorder()
		inner.ServeHTTP(w, req.WithContext(ctx))
		header := w.Header().Get(idemhttp.ReplayedHeader) == "true"
		if header != c.replayed || info.Replayed() != c.replayed {
			t.Errorf("request %d (%s, %s): %d, header replayed %v, CallInfo replayed %v, want %v",
				i+1, c.key, c.body, w.Code, header, info.Replayed(), c.replayed)
		}
	}
}
