package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// Result types before and after a deploy.
type (
	userV1       struct{ ID, Email string }
	userRenamed  struct{ ID, Mail string }
	userRemoved  struct{ ID string }
	userRetagged struct {
		ID    string
		Email string `json:"mail"`
	}
	userCase   struct{ ID, EMAIL string }
	nestedV1   struct{ U userV1 }
	nestedV2   struct{ U userRenamed }
	listV1     struct{ Us []userV1 }
	listV2     struct{ Us []userRenamed }
	ptrV1      struct{ U *userV1 }
	ptrV2      struct{ U *userRenamed }
	mapResult  map[string]string
	embeddedV1 struct{ userV1 }
	embeddedV2 struct{ userRenamed }
)

// replayAs stores first's result under a key with one result type, then
// replays it into the type of second, as a deploy that changed the result
// type between a call and its retry does.
func replayAs[A, B any](t *testing.T, first A) (B, error) {
	t.Helper()
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	_, err := call(t.Context(), ex, m, "k", func(context.Context) (A, error) { return first, nil })
	require.NoError(t, err)
	ran := false
	v, err := call(t.Context(), ex, m, "k", func(context.Context) (B, error) { ran = true; var zero B; return zero, nil })
	require.False(t, ran, "a retry never runs the method again")
	return v, err
}

// TestReplayAcrossResultDeploy: a stored result whose fields the new result
// type cannot all place (a renamed, removed or retagged field, at any
// depth: nested, in a slice, behind a pointer, embedded) is ErrUndecodable
// with the zero value, never the result with the renamed field empty and
// no error; a stored result the new type takes whole replays (a field
// renamed only in case, as JSON matches names; a map).
func TestReplayAcrossResultDeploy(t *testing.T) {
	u := userV1{ID: "u1", Email: "a@b"}
	refused := map[string]func() error{
		"renamed":          func() error { _, err := replayAs[userV1, userRenamed](t, u); return err },
		"removed":          func() error { _, err := replayAs[userV1, userRemoved](t, u); return err },
		"retagged":         func() error { _, err := replayAs[userV1, userRetagged](t, u); return err },
		"nested":           func() error { _, err := replayAs[nestedV1, nestedV2](t, nestedV1{u}); return err },
		"in a slice":       func() error { _, err := replayAs[listV1, listV2](t, listV1{[]userV1{u}}); return err },
		"behind a pointer": func() error { _, err := replayAs[ptrV1, ptrV2](t, ptrV1{&u}); return err },
		"embedded":         func() error { _, err := replayAs[embeddedV1, embeddedV2](t, embeddedV1{u}); return err },
	}
	for name, f := range refused {
		err := f()
		assert.ErrorIs(t, err, idem.ErrUndecodable, name)
	}

	got, err := replayAs[userV1, userCase](t, u)
	require.NoError(t, err)
	assert.Equal(t, userCase{ID: "u1", EMAIL: "a@b"}, got, "JSON matches a member to a field whatever its case")
	m, err := replayAs[userV1, mapResult](t, u)
	require.NoError(t, err)
	assert.Equal(t, mapResult{"ID": "u1", "Email": "a@b"}, m)
}

// TestJSONCodecRoundTripsWhole: Unmarshal still takes what Marshal wrote,
// and refuses data after the value.
func TestJSONCodecRoundTripsWhole(t *testing.T) {
	var c idem.JSONCodec
	b, err := c.Marshal(listV1{[]userV1{{ID: "x", Email: "y"}}})
	require.NoError(t, err)
	var back listV1
	require.NoError(t, c.Unmarshal(b, &back))
	assert.Equal(t, listV1{[]userV1{{ID: "x", Email: "y"}}}, back)
	assert.Error(t, c.Unmarshal(append(b, " {}"...), &back))
}
