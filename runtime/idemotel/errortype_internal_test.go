package idemotel

import (
	"fmt"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestErrorTypeTenantQuota: a tenant's share refusal is its own error.type,
// apart from a full store's, so that a metric tells one tenant's flood from
// a full store.
func TestErrorTypeTenantQuota(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("memstore: claim 00: %w", &idem.TenantQuotaError{Tenant: "a", Share: 1}): "tenant_quota",
		fmt.Errorf("memstore: claim 00: %w", idem.ErrStoreFull):                             "store_full",
	} {
		if got := errorType(err); got != want {
			t.Errorf("errorType(%v) = %q, want %q", err, got, want)
		}
	}
}
