package idemhttp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func testStreaming(t *testing.T, newStore newStoreFunc) {
	firstChunk := make(chan struct{})
	e := newEnv(t, newStore, func(e *env, w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(2 * hangGuard)); err != nil {
			t.Errorf("SetWriteDeadline through the middleware: %v", err)
		}
		if err := rc.EnableFullDuplex(); err != nil {
			t.Errorf("EnableFullDuplex through the middleware: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: 1\n\n")
		if err := rc.Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
		if e.runs.Load() == 1 {
			select {
			case <-firstChunk: // the client read the first event before the handler finished
			case <-time.After(hangGuard):
				t.Error("the first event did not reach the client before the handler finished")
			}
		}
		_, _ = io.WriteString(w, "data: 2\n\n")
		w.(http.Flusher).Flush()
	})
	srv := loopback(t, e.h)
	key := idemhttp.GenerateKey()
	req, _ := http.NewRequest("POST", srv.URL+"/events", strings.NewReader("{}"))
	req.Header.Set(idemhttp.Header, key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("data: 1\n\n"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "data: 1\n\n" {
		t.Fatalf("first event %q %v", buf, err)
	}
	close(firstChunk)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(rest) != "data: 2\n\n" {
		t.Fatalf("rest %q", rest)
	}
	// The streamed response was stored whole and is replayed in one piece.
	e.waitIdemEvents(idem.EventCompleted, 1)
	st, h, body, err := post(t, srv.Client(), srv.URL+"/events", key, "{}")
	if err != nil || st != 200 || body != "data: 1\n\ndata: 2\n\n" || h.Get(idemhttp.ReplayedHeader) != "true" ||
		h.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("replay of a stream: %d %q %v %v", st, body, h, err)
	}
	e.wantRuns(1)
}

// TestStreaming checks a stream through the middleware on every store (onEveryStore).
func TestStreaming(t *testing.T) { onEveryStore(t, testStreaming) }
