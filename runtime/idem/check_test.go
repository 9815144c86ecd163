package idem_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestCheckClaim: the validation every store shares, case by case: what
// passes, what is refused, and which refusals wrap ErrTooLarge.
func TestCheckClaim(t *testing.T) {
	key := func(tenant, op int) idem.Key {
		return idem.Key{Tenant: strings.Repeat("t", tenant), Op: strings.Repeat("o", op)}
	}
	for _, tc := range []struct {
		name     string
		req      idem.ClaimRequest
		want     string // "" when accepted
		tooLarge bool
	}{
		{"usual", idem.ClaimRequest{Key: key(5, 5), Lease: time.Second, TTL: time.Minute}, "", false},
		{"lease 0", idem.ClaimRequest{Key: key(5, 5), TTL: time.Minute}, "", false},
		{"lease = TTL", idem.ClaimRequest{Key: key(5, 5), Lease: time.Minute, TTL: time.Minute}, "", false},
		{"longest names", idem.ClaimRequest{Key: key(idem.MaxTenantLen, idem.MaxOpLen), TTL: time.Minute}, "", false},
		{"single key space", idem.ClaimRequest{Key: key(0, 0), TTL: time.Minute}, "", false},
		{"TTL 0", idem.ClaimRequest{Key: key(5, 5)}, "TTL must be positive", false},
		{"TTL negative", idem.ClaimRequest{Key: key(5, 5), TTL: -time.Second}, "TTL must be positive", false},
		{"lease negative", idem.ClaimRequest{Key: key(5, 5), Lease: -1, TTL: time.Minute}, "lease must be within 0..TTL", false},
		{"lease past TTL", idem.ClaimRequest{Key: key(5, 5), Lease: time.Hour, TTL: time.Minute}, "lease must be within 0..TTL", false},
		{"tenant too long", idem.ClaimRequest{Key: key(idem.MaxTenantLen+1, 5), TTL: time.Minute}, "tenant of 1025 bytes, more than 1024", true},
		{"op too long", idem.ClaimRequest{Key: key(5, idem.MaxOpLen+1), TTL: time.Minute}, "operation of 1025 bytes, more than 1024", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := idem.CheckClaim(tc.req)
			check(t, err, tc.want, tc.tooLarge)
			if tc.want == "" || tc.tooLarge {
				check(t, idem.CheckKey(tc.req.Key), tc.want, tc.tooLarge)
			}
		})
	}
}

// TestCheckOutcome: the outcome validation every store shares.
func TestCheckOutcome(t *testing.T) {
	ok := idem.Outcome{Status: idem.StatusSucceeded, Body: []byte("b")}
	big := func(body, code, msg, meta int) idem.Outcome {
		return idem.Outcome{Status: idem.StatusFailedFinal, Body: make([]byte, body), ErrCode: strings.Repeat("c", code),
			ErrMessage: strings.Repeat("m", msg), Meta: make([]byte, meta)}
	}
	const q = idem.MaxOutcomeLen / 4
	for _, tc := range []struct {
		name     string
		out      idem.Outcome
		ttl      time.Duration
		want     string
		tooLarge bool
	}{
		{"succeeded", ok, time.Minute, "", false},
		{"failed final", idem.Outcome{Status: idem.StatusFailedFinal, ErrCode: "x"}, time.Minute, "", false},
		{"empty", idem.Outcome{Status: idem.StatusSucceeded}, time.Nanosecond, "", false},
		{"largest, every part counted", big(q, q, q, q), time.Minute, "", false},
		{"processing", idem.Outcome{Status: idem.StatusProcessing}, time.Minute, "is not final", false},
		{"zero status", idem.Outcome{}, time.Minute, "is not final", false},
		{"TTL 0", ok, 0, "TTL must be positive", false},
		{"TTL negative", ok, -time.Minute, "TTL must be positive", false},
		{"one byte of meta too many", big(q, q, q, q+1), time.Minute, fmt.Sprintf("outcome of %d bytes, more than %d", idem.MaxOutcomeLen+1, idem.MaxOutcomeLen), true},
		{"body alone too large", big(idem.MaxOutcomeLen+1, 0, 0, 0), time.Minute, "more than", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, idem.CheckOutcome(&tc.out, tc.ttl), tc.want, tc.tooLarge)
		})
	}
}

func check(t *testing.T, err error, want string, tooLarge bool) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	case err != nil && errors.Is(err, idem.ErrTooLarge) != tooLarge:
		t.Fatalf("errors.Is(%v, ErrTooLarge) = %v, want %v", err, !tooLarge, tooLarge)
	}
}

// A store validates a claim and an outcome with the shared checks before
// anything else, and wraps their errors with its own prefix.
func ExampleCheckClaim() {
	req := idem.ClaimRequest{Key: idem.Key{Tenant: "acme", Op: "Orders.Place"}, Lease: time.Hour, TTL: time.Minute}
	if err := idem.CheckClaim(req); err != nil {
		fmt.Printf("mystore: claim %s: %v\n", req.Key.Hex(), err)
	}
	out := idem.Outcome{Status: idem.StatusSucceeded, Body: make([]byte, idem.MaxOutcomeLen+1)}
	err := idem.CheckOutcome(&out, time.Minute)
	fmt.Println(errors.Is(err, idem.ErrTooLarge))
	// Output:
	// mystore: claim 0000000000000000000000000000000000000000000000000000000000000000: lease must be within 0..TTL
	// true
}
