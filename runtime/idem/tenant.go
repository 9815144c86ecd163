package idem

import (
	"context"
	"errors"
	"fmt"
)

// ErrMissingTenant is returned when the executor's tenancy was chosen
// (WithTenant), or a door put a tenant in the call's context
// (ContextWithTenant), but no tenant is named for this call: the WithTenant
// function returned "" and no door named one, or a door named "". Nothing
// was claimed and the method was not called. An empty tenant is never the
// shared key space: that is said with SingleTenant, in the code. The tenant
// scopes every key, so errors.Is(ErrMissingTenant, ErrMissingKey) is true
// too, as for a `tenant` key part that is empty.
var ErrMissingTenant error = missingTenant{}

type missingTenant struct{}

func (missingTenant) Error() string { return "idem: no tenant for the call" }

// Is makes ErrMissingTenant match ErrMissingKey: the tenant is a part of
// every key.
func (missingTenant) Is(target error) bool { return target == ErrMissingKey }

// ErrTenantConflict is returned when the executor's WithTenant function
// and the door that put a tenant in the call's context (ContextWithTenant)
// name two different tenants for one call. Nothing was claimed and the
// method was not called: one of the two layers reads the wrong caller.
var ErrTenantConflict = errors.New("idem: the executor and the door name different tenants")

// ContextWithTenant returns a copy of ctx that names the caller's tenant.
// The door that authenticates a caller calls it once; every executor,
// wrapper and nested call below it scopes its records by that tenant, as
// the package documentation's section Tenancy describes. A tenant of ""
// fails every call below it with ErrMissingTenant; a tenant that disagrees
// with the executor's WithTenant function fails with ErrTenantConflict.
func ContextWithTenant(ctx context.Context, tenant string) context.Context {
	return withField(ctx, fTenant, tenant, nil)
}

// TenantFromContext returns the tenant a door put in ctx with
// ContextWithTenant, and whether one did.
func TenantFromContext(ctx context.Context) (string, bool) {
	s := lookup(ctx, fTenant)
	return s.tenant, s.found&fTenant != 0
}

// callTenant is the tenant of a call on ex with ctx, whose state s holds
// the door's tenant when it has one: see ContextWithTenant. The error
// wraps ErrMissingTenant or ErrTenantConflict.
func (ex *Executor) callTenant(ctx context.Context, s *callState) (string, error) {
	door, fromDoor := s.tenant, s.found&fTenant != 0
	if ex.single {
		if fromDoor && door == "" {
			return "", fmt.Errorf("%w: the door's context names the empty tenant", ErrMissingTenant)
		}
		return door, nil
	}
	t := ex.tenant(ctx)
	switch {
	case !fromDoor && t == "":
		return "", fmt.Errorf("%w: the executor's WithTenant function returned \"\"", ErrMissingTenant)
	case !fromDoor:
		return t, nil
	case door == "":
		return "", fmt.Errorf("%w: the door's context names the empty tenant", ErrMissingTenant)
	case t == "" || t == door:
		return door, nil
	default:
		return "", fmt.Errorf("%w: the executor's WithTenant function names %.64q, the door %.64q", ErrTenantConflict, t, door)
	}
}

// IsSingleTenant reports whether the executor was built with SingleTenant.
// A door that scopes its own keys by tenant (idemhttp.WithTenant) reads it
// to keep the key of its own claim what it was before doors put their
// tenant in the context: a single-tenant executor's claim stays in the
// shared key space, the tenant being one of the key's parts.
func (ex *Executor) IsSingleTenant() bool { return ex.single }
