package idemhttp_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// negotiatingHandler answers in the representation the request selects:
// gzip when Accept-Encoding names it (Vary: Accept-Encoding), a greeting in
// the Accept-Language on /greet (Vary: Accept-Language), and on /asset a
// pre-compressed body whatever the request says (no Vary).
func negotiatingHandler(e *env, w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/plain")
	body := fmt.Sprintf("order %d", e.runs.Load())
	gz := false
	switch r.URL.Path {
	case "/greet":
		h.Set("Vary", "Accept-Language")
		body = r.Header.Get("Accept-Language") + " " + body
	case "/me":
		h.Set("Vary", "Authorization, Idempotency-Key")
	case "/asset":
		gz = true
	default:
		h.Set("Vary", "Accept-Encoding")
		gz = strings.Contains(r.Header.Get("Accept-Encoding"), "gzip")
	}
	if !gz {
		w.WriteHeader(201)
		_, _ = io.WriteString(w, body)
		return
	}
	h.Set("Content-Encoding", "gzip")
	w.WriteHeader(201)
	zw := gzip.NewWriter(w)
	_, _ = io.WriteString(zw, body)
	_ = zw.Close()
}

func testReplayVary(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore, negotiatingHandler)
	type try struct {
		hdr  []string
		want int // 0: replayed
	}
	check := func(target string, runs int64, tries ...try) {
		t.Helper()
		key := idemhttp.GenerateKey()
		first := e.do("POST", target, key, "{}", tries[0].hdr...)
		wantStatus(t, first, 201)
		for _, tr := range tries[1:] {
			w := e.do("POST", target, key, "{}", tr.hdr...)
			if tr.want == 0 {
				wantStatus(t, w, 201)
				wantReplayed(t, w.Header(), true)
				if !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) || w.Header().Get("Content-Encoding") != first.Header().Get("Content-Encoding") {
					t.Fatalf("%s %q: replay %v %q, first %v %q", target, tr.hdr, w.Header(), w.Body, first.Header(), first.Body)
				}
				continue
			}
			p := wantProblem(t, w, tr.want, "replay-not-acceptable")
			if name := tries[0].hdr; len(name) > 0 && !strings.Contains(p.Detail, http.CanonicalHeaderKey(name[0])) {
				t.Errorf("%s %q: detail %q does not name %s", target, tr.hdr, p.Detail, name[0])
			}
		}
		e.wantRuns(runs)
	}
	ae := func(v string) []string { return []string{"Accept-Encoding", v} }
	// A gzip response, selected by Accept-Encoding: gzip.
	check("/orders", 1,
		try{ae("gzip"), 0},
		try{ae("gzip"), 0},
		try{ae("br, gzip;q=0.5"), 0},
		try{ae("x-gzip"), 0},
		try{ae("*"), 0},
		try{nil, 406}, // no Accept-Encoding: no coding accepted
		try{ae("identity"), 406},
		try{ae("gzip;q=0"), 406},
		try{ae("br"), 406},
		try{ae("*, gzip;q=0"), 406},
	)
	// An uncompressed response is acceptable unless identity is refused.
	check("/orders", 2,
		try{nil, 0},
		try{ae("gzip"), 0},
		try{ae("*;q=0"), 406},
		try{ae("identity;q=0, gzip"), 406},
	)
	// Pre-compressed, no Vary: the first request's Accept-Encoding selected
	// it, even absent; the same request is always replayed.
	check("/asset", 3,
		try{nil, 0},
		try{nil, 0},
		try{ae("gzip, deflate"), 0},
		try{ae("deflate"), 406},
	)
	// Vary: Accept-Language: the same list elements, or 406.
	al := func(v string) []string { return []string{"Accept-Language", v} }
	check("/greet", 4,
		try{al("en, fr;q=0.5"), 0},
		try{al("en,fr;q=0.5"), 0},
		try{al("fr"), 406},
		try{nil, 406},
	)
	// Vary: Authorization: compared, never stored in clear.
	az := func(v string) []string { return []string{"Authorization", v} }
	check("/me", 5,
		try{az("Bearer a"), 0},
		try{az("Bearer a"), 0},
		try{az("Bearer b"), 406},
	)
	// The key's form (quoted or bare) is not a representation choice.
	quoted := idemhttp.GenerateKey()
	wantStatus(t, e.do("POST", "/me", idemhttp.FormatKey(quoted), "{}", az("Bearer a")...), 201)
	wantReplayed(t, e.do("POST", "/me", quoted, "{}", az("Bearer a")...).Header(), true)
	e.wantRuns(6)
	if n := len(e.events(idemhttp.EventNotAcceptable)); n != 11 {
		t.Fatalf("%d not-acceptable events, want 11", n)
	}
	// And the first response decodes.
	key := idemhttp.GenerateKey()
	e.do("POST", "/orders", key, "{}", ae("gzip")...)
	w := e.do("POST", "/orders", key, "{}", ae("gzip")...)
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(zr); err != nil || string(b) != "order 7" {
		t.Fatalf("replayed gzip body %q %v", b, err)
	}
}

// TestReplayHonoursAcceptEncodingAndVary checks replays against Accept-Encoding and Vary on every store (onEveryStore).
func TestReplayHonoursAcceptEncodingAndVary(t *testing.T) { onEveryStore(t, testReplayVary) }
