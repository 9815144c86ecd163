package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
)

func TestKeyEncodingIsUnambiguous(t *testing.T) {
	ab, err := idem.NewKey("t", "op", "a", "bc")
	require.NoError(t, err)
	abc, err := idem.NewKey("t", "op", "ab", "c")
	require.NoError(t, err)
	assert.NotEqual(t, ab.ID, abc.ID, `"a"+"bc" and "ab"+"c" are different keys`)

	var p1, p2 idem.KeyParts
	p1.String("s", "7")
	p2.Int(7)
	k1, _ := p1.Key("t", "op")
	k2, _ := p2.Key("t", "op")
	assert.NotEqual(t, k1.ID, k2.ID, "a string and an integer part never collide")

	tenant1, _ := idem.NewKey("t1", "op", "a")
	tenant2, _ := idem.NewKey("t2", "op", "a")
	op2, _ := idem.NewKey("t1", "op2", "a")
	assert.NotEqual(t, tenant1.ID, tenant2.ID, "keys are scoped by tenant")
	assert.NotEqual(t, tenant1.ID, op2.ID, "keys are scoped by operation")
	again, _ := idem.NewKey("t1", "op", "a")
	assert.Equal(t, tenant1, again, "the same parts give the same key")
}

// TestKeyPartsTenant: a door's tenant (KeyParts.Tenant) is the key's
// tenant when the executor names none, so that stores scope and count the
// record by it, and a part otherwise (the key a door built before); an
// empty one is a missing part.
func TestKeyPartsTenant(t *testing.T) {
	door := func(tenant, key string) *idem.KeyParts {
		var p idem.KeyParts
		p.Tenant(tenant)
		p.String("Idempotency-Key", key)
		return &p
	}
	asPart := func(tenant, key string) *idem.KeyParts {
		var p idem.KeyParts
		p.String("tenant", tenant)
		p.String("Idempotency-Key", key)
		return &p
	}
	alone := func(key string) *idem.KeyParts {
		var p idem.KeyParts
		p.String("Idempotency-Key", key)
		return &p
	}
	for _, c := range []struct {
		name       string
		parts      *idem.KeyParts
		execTenant string
		want       *idem.KeyParts
		wantTenant string
		wantText   string
	}{
		{"single-tenant executor: the door's tenant scopes the key", door("acme", "k1"), "", alone("k1"), "acme", "k1"},
		{"tenant executor: the door's tenant is a part", door("acme", "k1"), "exec", asPart("acme", "k1"), "exec", "acme+k1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, err := c.parts.Key(c.execTenant, "POST /orders")
			require.NoError(t, err)
			want, err := c.want.Key(c.wantTenant, "POST /orders")
			require.NoError(t, err)
			assert.Equal(t, want, k)
			assert.Equal(t, c.wantTenant, k.Tenant)
			assert.Equal(t, c.wantText, k.Text)
		})
	}
	a, _ := door("a", "k1").Key("", "op")
	b, _ := door("b", "k1").Key("", "op")
	assert.NotEqual(t, a.ID, b.ID, "two tenants' same key are two keys")
	_, err := door("", "k1").Key("", "op")
	var missing *idem.MissingKeyError
	require.ErrorAs(t, err, &missing)
	assert.Equal(t, "tenant", missing.Path)
}

func TestKeyReadableForm(t *testing.T) {
	var p idem.KeyParts
	p.String("order.ID", "A-1")
	p.Int(-3)
	p.Uint(9)
	p.Bool(true)
	p.Bytes("id", []byte{0xde, 0xad})
	k, err := p.Key("acme", "Service.Pay")
	require.NoError(t, err)
	assert.Equal(t, "A-1+-3+9+true+dead", k.Text)
	assert.Equal(t, "acme/Service.Pay/A-1+-3+9+true+dead", k.String())
	assert.Len(t, k.Hex(), 64)

	long, err := idem.NewKey("", "op", strings.Repeat("é", 300))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(long.Text), idem.MaxReadableKey, "long readable forms are cut")
	assert.True(t, strings.HasPrefix(strings.Repeat("é", 300), long.Text), "and cut on a rune boundary")
}

func TestMissingKeyParts(t *testing.T) {
	cases := map[string]func(p *idem.KeyParts){
		"empty string": func(p *idem.KeyParts) { p.String("order.ID", "") },
		"nil on path":  func(p *idem.KeyParts) { p.Missing("order.ID") },
		"zero bytes":   func(p *idem.KeyParts) { p.Bytes("order.ID", make([]byte, 16)) },
	}
	for name, add := range cases {
		t.Run(name, func(t *testing.T) {
			var p idem.KeyParts
			p.String("op", "pay")
			add(&p)
			_, err := p.Key("", "Service.Pay")
			require.ErrorIs(t, err, idem.ErrMissingKey)
			var mk *idem.MissingKeyError
			require.ErrorAs(t, err, &mk)
			assert.Equal(t, "order.ID", mk.Path)
		})
	}
	var none idem.KeyParts
	_, err := none.Key("", "op")
	assert.ErrorIs(t, err, idem.ErrMissingKey, "a key with no parts is missing")
}

func TestDerive(t *testing.T) {
	a := idem.Derive("parent", "charge")
	assert.Equal(t, a, idem.Derive("parent", "charge"), "stable across retries")
	assert.NotEqual(t, a, idem.Derive("parent", "ship"), "distinct per step")
	assert.NotEqual(t, idem.Derive("ab", "c"), idem.Derive("a", "bc"), "unambiguous")
	assert.Len(t, a, 32)
}

// TestKeyContext: ContextWithKey carries the key's ID for KeyFrom, the
// innermost key wins, and everything else (values, cancellation, its cause,
// the deadline) is the parent's.
func TestKeyContext(t *testing.T) {
	_, ok := idem.KeyFrom(context.Background())
	assert.False(t, ok)

	type valueKey struct{}
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), valueKey{}, "v"))
	k1, err := idem.NewKey("t", "Op", "k1")
	require.NoError(t, err)
	k2, err := idem.NewKey("t", "Op", "k2")
	require.NoError(t, err)
	ctx := idem.ContextWithKey(parent, k1)
	got, ok := idem.KeyFrom(ctx)
	assert.True(t, ok)
	assert.Equal(t, k1.Hex(), got)
	inner, ok := idem.KeyFrom(idem.ContextWithKey(ctx, k2))
	assert.True(t, ok)
	assert.Equal(t, k2.Hex(), inner, "the innermost key wins")
	assert.Equal(t, "v", ctx.Value(valueKey{}), "other values are the parent's")

	child, stop := context.WithCancel(ctx)
	defer stop()
	boom := errors.New("boom")
	cancel(boom)
	<-child.Done()
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	assert.ErrorIs(t, context.Cause(child), boom, "the parent's cause reaches through")
}

func TestFingerprint(t *testing.T) {
	sum := func(add func(h *idem.Hasher)) idem.Fingerprint {
		var h idem.Hasher
		add(&h)
		f, err := h.Sum()
		require.NoError(t, err)
		return f
	}
	type req struct {
		Amount int64
		Tags   map[string]int
	}
	a := sum(func(h *idem.Hasher) { h.Value(req{1, map[string]int{"x": 1, "y": 2}}); h.String("pay") })
	b := sum(func(h *idem.Hasher) { h.Value(req{1, map[string]int{"y": 2, "x": 1}}); h.String("pay") })
	assert.Equal(t, a, b, "map order does not change the fingerprint")
	c := sum(func(h *idem.Hasher) { h.Value(req{2, nil}); h.String("pay") })
	assert.NotEqual(t, a, c)
	assert.NotEqual(t,
		sum(func(h *idem.Hasher) { h.String("a"); h.String("bc") }),
		sum(func(h *idem.Hasher) { h.String("ab"); h.String("c") }), "unambiguous")
	assert.NotEqual(t,
		sum(func(h *idem.Hasher) { h.Int(1) }),
		sum(func(h *idem.Hasher) { h.Uint(1) }), "kinds are tagged")
	var h idem.Hasher
	h.Value(func() {})
	_, err := h.Sum()
	assert.Error(t, err, "an unencodable value is an error, not a silent collision")
}
