package idemadmin

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ErrOtherTenant reports that a request confined to one tenant named
// another (the tenant= parameter of a confined request, a ListQuery of
// another tenant given to a Confined). It is decided before the store is
// asked, so it says nothing about the other tenant's records. The handler
// answers it 403.
var ErrOtherTenant = errors.New("idemadmin: the request is confined to one tenant and names another")

// Scope is what one request may reach: one tenant's records (Tenant), or
// every tenant's (AllTenants). Exactly one of the two is set; the zero Scope
// (no tenant, not all tenants) reaches nothing: an empty tenant is never
// "every tenant" nor a shared key space.
type Scope struct {
	// Tenant confines the request to this tenant's records.
	Tenant string
	// AllTenants lets the request reach every tenant's records: an
	// operator of the whole service, or a single-tenant service.
	AllTenants bool
}

// invalid reports why s reaches nothing, or "".
func (s Scope) invalid() string {
	switch {
	case s.AllTenants && s.Tenant != "":
		return "the scope names a tenant and every tenant"
	case !s.AllTenants && s.Tenant == "":
		return "the scope names no tenant (Scope{Tenant: t} confines a request to t, Scope{AllTenants: true} reaches every tenant)"
	}
	return ""
}

// Confined is an idem.AdminStore confined to one tenant's records: a record
// of another tenant is answered exactly as a record that does not exist
// (an error wrapping idem.ErrNotFound, with the same text), and Forget
// cannot touch it. idemadmin's handler serves a confined request through
// one, and idemctl --tenant does the same.
//
// A record is the tenant's when its store keeps the tenant and it is this
// one (a record's ID is the hash of its tenant, operation and parts, so a
// record under one ID never changes tenant); LookupParts also finds the
// records of a store that keeps no tenant (redisstore), because the key it
// builds from the tenant is the proof. Listing and counting are the
// store's filter by tenant, and every entry is checked again.
type Confined struct {
	store  idem.AdminStore
	tenant string
}

// Confine returns store confined to tenant's records. It panics if store
// is nil or tenant is "": an empty tenant confines to nothing.
func Confine(store idem.AdminStore, tenant string) *Confined {
	switch {
	case store == nil:
		panic("idemadmin: Confine: the store is nil")
	case tenant == "":
		panic("idemadmin: Confine: the tenant is empty (an empty tenant is never a scope)")
	}
	return &Confined{store: store, tenant: tenant}
}

// Tenant returns the tenant c is confined to.
func (c *Confined) Tenant() string { return c.tenant }

// notFound is the one answer for an absent record and another tenant's.
func notFound(key idem.Key) error {
	return fmt.Errorf("idemadmin: lookup %s: %w", key.Hex(), idem.ErrNotFound)
}

// Lookup implements idem.AdminStore: the record of key's ID when its store
// keeps c's tenant for it. A store that keeps no tenant (redisstore)
// answers ErrNotFound to every lookup by ID alone: use LookupParts.
func (c *Confined) Lookup(ctx context.Context, key idem.Key) (idem.Entry, error) {
	e, err := c.store.Lookup(ctx, key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return idem.Entry{}, notFound(key)
	case err != nil:
		return idem.Entry{}, err
	case e.Key.ID != key.ID || e.Key.Tenant != c.tenant:
		return idem.Entry{}, notFound(key)
	}
	return e, nil
}

// LookupParts looks up the key c's tenant's callers build for op and parts
// (idem.NewKey(c.Tenant(), op, parts...)). A record whose store keeps
// another tenant is refused all the same (it cannot be under this ID).
func (c *Confined) LookupParts(ctx context.Context, op string, parts ...string) (idem.Entry, error) {
	key, err := idem.NewKey(c.tenant, op, parts...)
	if err != nil {
		return idem.Entry{}, err
	}
	e, err := c.store.Lookup(ctx, key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return idem.Entry{}, notFound(key)
	case err != nil:
		return idem.Entry{}, err
	case e.Key.ID != key.ID || (e.Key.Tenant != "" && e.Key.Tenant != c.tenant):
		return idem.Entry{}, notFound(key)
	}
	if e.Key.Tenant == "" && e.Key.Op == "" { // a store that keeps neither: the key says them
		e.Key.Tenant, e.Key.Op, e.Key.Text = key.Tenant, key.Op, key.Text
	}
	return e, nil
}

// List implements idem.AdminStore: the store's listing of c's tenant.
// A query of another tenant is ErrOtherTenant.
func (c *Confined) List(ctx context.Context, q idem.ListQuery) (idem.Page, error) {
	if q.ByTenant && q.Tenant != c.tenant {
		return idem.Page{}, ErrOtherTenant
	}
	q.Tenant, q.ByTenant = c.tenant, true
	p, err := c.store.List(ctx, q)
	if err != nil {
		return idem.Page{}, err
	}
	kept := p.Entries[:0]
	for _, e := range p.Entries {
		if e.Key.Tenant == c.tenant {
			kept = append(kept, e)
		}
	}
	p.Entries = kept
	return p, nil
}

// Stats implements idem.AdminStore: the store's counts of c's tenant. A
// query of another tenant is ErrOtherTenant.
func (c *Confined) Stats(ctx context.Context, q idem.StatsQuery) ([]idem.Stat, error) {
	if q.ByTenant && q.Tenant != c.tenant {
		return nil, ErrOtherTenant
	}
	q.Tenant, q.ByTenant = c.tenant, true
	return c.store.Stats(ctx, q)
}

// Forget implements idem.AdminStore: it forgets the record only when
// Lookup finds it c's tenant's; otherwise it answers as for an absent
// record and the store is not asked to forget.
func (c *Confined) Forget(ctx context.Context, req idem.ForgetRequest) error {
	if _, err := c.Lookup(ctx, req.Key); err != nil {
		return err
	}
	err := c.store.Forget(ctx, req)
	if errors.Is(err, idem.ErrNotFound) {
		return notFound(req.Key)
	}
	return err
}
