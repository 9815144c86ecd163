package idemhttp_test

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

var allStatuses = []int{200, 201, 202, 204, 301, 302, 303, 304, 307, 308, 400, 401, 402, 403, 404, 405,
	408, 409, 410, 412, 415, 422, 425, 429, 500, 501, 502, 503, 504}

func testStatusPolicy(t *testing.T, newStore newStoreFunc) {
	for _, status := range allStatuses {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			e := newEnv(t, newStore, statusHandler(status))
			key := idemhttp.GenerateKey()
			first := e.do("POST", "/orders", key, `{"n":1}`)
			wantStatus(t, first, status)
			wantReplayed(t, first.Header(), false)
			second := e.do("POST", "/orders", key, `{"n":1}`)
			wantStatus(t, second, status)
			stored := idemhttp.DefaultPolicy(status)
			wantStored := status < 500 && status != 408 && status != 409 && status != 425 && status != 429
			if stored != wantStored {
				t.Fatalf("DefaultPolicy(%d) = %v", status, stored)
			}
			if stored {
				e.wantRuns(1)
				wantReplayed(t, second.Header(), true)
				if !bytes.Equal(first.Body.Bytes(), second.Body.Bytes()) {
					t.Fatalf("replayed body %q, first %q", second.Body, first.Body)
				}
				if n := len(e.events(idemhttp.EventReplayed)); n != 1 {
					t.Fatalf("%d replay events, want 1", n)
				}
			} else {
				e.wantRuns(2)
				wantReplayed(t, second.Header(), false)
				if n := len(e.events(idemhttp.EventNotStored)); n != 2 {
					t.Fatalf("%d not-stored events, want 2", n)
				}
				if n := len(e.idemEvents(idem.EventReleased)); n != 2 {
					t.Fatalf("%d released events, want 2", n)
				}
			}
		})
	}
}

// TestStatusPolicy checks DefaultPolicy and its events for every status on every store (onEveryStore).
func TestStatusPolicy(t *testing.T) { onEveryStore(t, testStatusPolicy) }
