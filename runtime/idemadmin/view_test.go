package idemadmin_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// testOrigin is the span of the W3C Trace Context specification's example.
var testOrigin = idem.TraceOrigin{
	TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:  [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	Flags:   1,
}

// TestViewMeta: a record's metadata as an operator sees it: the origin
// decoded (no hex), the raw bytes where the view does not say all of them,
// and why when they cannot be read.
func TestViewMeta(t *testing.T) {
	origin := idem.CallMeta{Origin: testOrigin}.Append(nil)
	unsampled := testOrigin
	unsampled.Flags = 0
	for _, c := range []struct {
		name string
		meta []byte
		want string // the outcome's JSON beside its body
	}{
		{"none", nil, `{}`},
		{"origin", origin, `{"origin":{"trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","sampled":true,
			"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`},
		{"not sampled", idem.CallMeta{Origin: unsampled}.Append(nil), `{"origin":{"trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","sampled":false,
			"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}}`},
		{"origin and a later release's field", append(origin, 9, 1, 0xAB), `{"origin":{"trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","sampled":true,
			"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},"meta_hex":"` + hex.EncodeToString(append(origin, 9, 1, 0xAB)) + `"}`},
		{"a later version", []byte{2, 1, 2, 3}, `{"meta_hex":"02010203","meta_error":"idem: the record's metadata cannot be read: version 2 (this release reads version 1)"}`},
		{"someone else's bytes", []byte("{}"), `{"meta_hex":"7b7d","meta_error":"idem: the record's metadata cannot be read: version 123 (this release reads version 1)"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := idemadmin.View(idem.Entry{Record: idem.Record{Status: idem.StatusFailedFinal,
				Outcome: idem.Outcome{Status: idem.StatusFailedFinal, Meta: c.meta}}})
			got, err := json.Marshal(v.Outcome)
			require.NoError(t, err)
			assert.JSONEq(t, c.want, string(got))
		})
	}
}

// TestHandlerOrigin: the handler serves the origin a record keeps through a
// real PostgreSQL store (its metadata's round trip), decoded.
func TestHandlerOrigin(t *testing.T) {
	pool, table := testenv.PGStoreTable(t, "idemadmin_")
	store := pgstore.New(pool, pgstore.WithTable(table))
	k, err := idem.NewKey("acme", "billing.Charge", "order-7")
	require.NoError(t, err)
	ctx := context.Background()
	c, err := store.Claim(ctx, idem.ClaimRequest{Key: k, Token: 42, Lease: time.Minute, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, c.Claimed)
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(`{"id":"ch_1"}`), Meta: idem.CallMeta{Origin: testOrigin}.Append(nil)}
	require.NoError(t, store.Complete(ctx, k, 42, out, time.Hour))

	var raw json.RawMessage
	require.Equal(t, http.StatusOK, mount(t, store).do("GET", "/admin/records/"+k.Hex(), "", &raw))
	var e struct {
		Outcome map[string]json.RawMessage `json:"outcome"`
	}
	require.NoError(t, json.Unmarshal(raw, &e))
	assert.JSONEq(t, `{"trace":"4bf92f3577b34da6a3ce929d0e0e4736","span":"00f067aa0ba902b7","sampled":true,
		"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`, string(e.Outcome["origin"]))
	assert.NotContains(t, e.Outcome, "meta_hex", "decoded, not in hex")
}
