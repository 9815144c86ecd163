package idem_test

import (
	"context"
	"encoding/json"
	"strconv"
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

// replayRewritten is replayAs with the record's Meta rewritten by meta
// between the call and its retry: nil meta for a record written by a
// release before the result type's hash (resulttype.go) existed, a forged
// or damaged one to check that only a matching hash skips the strict
// decoder.
func replayRewritten[A, B any](t *testing.T, first A, meta func([]byte) []byte) (B, error) {
	t.Helper()
	_, m, e := firstCall(t, first)
	key := mustKey(t, "k")
	require.NotEmpty(t, e.Outcome.Meta, "a success encoded by JSONCodec names its result type")
	rec := e.Record
	rec.Outcome.Meta = meta(rec.Outcome.Meta)
	old := memstore.New()
	require.NoError(t, old.Seed(t.Context(), key, rec, time.Minute))
	ran := false
	v, err := call(t.Context(), idem.NewExecutor(old, idem.SingleTenant()), m, "k", func(context.Context) (B, error) { ran = true; var zero B; return zero, nil })
	require.False(t, ran, "a retry never runs the method again")
	return v, err
}

// TestReplayOfEarlierRecords: a record written before the result type's
// hash existed (empty Meta), or whose hash is damaged or of another type
// (forged), is decoded strictly, as every record was before: a renamed
// field is ErrUndecodable, a record the type takes whole replays. A record
// whose hash is the type's replays (the fast path) with the same result.
func TestReplayOfEarlierRecords(t *testing.T) {
	u := userV1{ID: "u1", Email: "a@b"}
	earlier := func([]byte) []byte { return nil }
	otherType := func([]byte) []byte {
		return append([]byte{idem.MetaVersion, 2, 8}, "forged!!"...)
	}
	damaged := func(m []byte) []byte { return append([]byte{idem.MetaVersion, 2, 0xff}, m[3:]...) }
	laterVersion := func(m []byte) []byte { return append([]byte{idem.MetaVersion + 1}, m[1:]...) }
	for name, meta := range map[string]func([]byte) []byte{"earlier release": earlier, "another type's hash": otherType, "damaged": damaged, "a later version": laterVersion} {
		_, err := replayRewritten[userV1, userRenamed](t, u, meta)
		assert.ErrorIs(t, err, idem.ErrUndecodable, "%s: renamed", name)
		_, err = replayRewritten[nestedV1, nestedV2](t, nestedV1{u}, meta)
		assert.ErrorIs(t, err, idem.ErrUndecodable, "%s: nested", name)
		got, err := replayRewritten[userV1, userV1](t, u, meta)
		require.NoError(t, err, name)
		assert.Equal(t, u, got, name)
	}
	// Unchanged: the record's own hash, the fast path.
	got, err := replayRewritten[userV1, userV1](t, u, func(m []byte) []byte { return m })
	require.NoError(t, err)
	assert.Equal(t, u, got)
}

// TestResultShapeChanges: every change of a result type that the strict
// decoder refuses changes the hash the executor records (so that the replay
// is decoded strictly), at every depth; an unchanged shape under another
// name keeps it. Checked through what the executor stores.
func TestResultShapeChanges(t *testing.T) {
	type (
		arrV1   struct{ Us [1]userV1 }
		arrV2   struct{ Us [1]userRenamed }
		mapV1   struct{ M map[string]userV1 }
		mapV2   struct{ M map[string]userRenamed }
		unexpV1 struct{ ID, email string }
		unexpV2 struct{ ID, Email string }
		omitV1  struct{ ID string }
		omitV2  struct {
			ID string `json:",omitempty"`
		}
		userCopy struct{ ID, Email string }
		recurse  struct {
			ID   string
			Next *recurse
		}
	)
	metaOf := map[string][]byte{}
	for name, f := range map[string]func() []byte{
		"userV1":       func() []byte { return storedResultMeta[userV1](t, userV1{}) },
		"userRenamed":  func() []byte { return storedResultMeta[userRenamed](t, userRenamed{}) },
		"userRemoved":  func() []byte { return storedResultMeta[userRemoved](t, userRemoved{}) },
		"userRetagged": func() []byte { return storedResultMeta[userRetagged](t, userRetagged{}) },
		"userCase":     func() []byte { return storedResultMeta[userCase](t, userCase{}) },
		"nestedV1":     func() []byte { return storedResultMeta[nestedV1](t, nestedV1{}) },
		"nestedV2":     func() []byte { return storedResultMeta[nestedV2](t, nestedV2{}) },
		"listV1":       func() []byte { return storedResultMeta[listV1](t, listV1{}) },
		"listV2":       func() []byte { return storedResultMeta[listV2](t, listV2{}) },
		"ptrV1":        func() []byte { return storedResultMeta[ptrV1](t, ptrV1{}) },
		"ptrV2":        func() []byte { return storedResultMeta[ptrV2](t, ptrV2{}) },
		"embeddedV1":   func() []byte { return storedResultMeta[embeddedV1](t, embeddedV1{}) },
		"embeddedV2":   func() []byte { return storedResultMeta[embeddedV2](t, embeddedV2{}) },
		"arrV1":        func() []byte { return storedResultMeta[arrV1](t, arrV1{}) },
		"arrV2":        func() []byte { return storedResultMeta[arrV2](t, arrV2{}) },
		"mapV1":        func() []byte { return storedResultMeta[mapV1](t, mapV1{}) },
		"mapV2":        func() []byte { return storedResultMeta[mapV2](t, mapV2{}) },
		"unexpV1":      func() []byte { return storedResultMeta[unexpV1](t, unexpV1{email: "x"}) },
		"unexpV2":      func() []byte { return storedResultMeta[unexpV2](t, unexpV2{}) },
		"omitV1":       func() []byte { return storedResultMeta[omitV1](t, omitV1{}) },
		"omitV2":       func() []byte { return storedResultMeta[omitV2](t, omitV2{}) },
		"*userV1":      func() []byte { return storedResultMeta[*userV1](t, &userV1{}) },
		"userCopy":     func() []byte { return storedResultMeta[userCopy](t, userCopy{}) },
		"recurse":      func() []byte { return storedResultMeta[recurse](t, recurse{}) },
	} {
		metaOf[name] = f()
		require.NotEmpty(t, metaOf[name], name)
	}
	for _, pair := range [][2]string{
		{"userV1", "userRenamed"}, {"userV1", "userRemoved"}, {"userV1", "userRetagged"}, {"userV1", "userCase"},
		{"nestedV1", "nestedV2"}, {"listV1", "listV2"}, {"ptrV1", "ptrV2"}, {"embeddedV1", "embeddedV2"},
		{"arrV1", "arrV2"}, {"mapV1", "mapV2"}, {"unexpV1", "unexpV2"}, {"omitV1", "omitV2"}, {"userV1", "*userV1"},
	} {
		assert.NotEqual(t, metaOf[pair[0]], metaOf[pair[1]], "%s and %s record one shape", pair[0], pair[1])
	}
	assert.Equal(t, metaOf["userV1"], metaOf["userCopy"], "one shape under two names")
}

// storedResultMeta returns the Meta the executor stores with a success of
// type T.
func storedResultMeta[T any](t *testing.T, v T) []byte {
	t.Helper()
	_, _, e := firstCall(t, v)
	return e.Outcome.Meta
}

// firstCall stores v as the outcome of a first call of "T.M" with key "k",
// on a new memstore, and returns its executor, method and stored entry.
func firstCall[T any](t *testing.T, v T) (*idem.Executor, *idem.Method, idem.Entry) {
	t.Helper()
	st := memstore.New()
	ex := idem.NewExecutor(st, idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute}
	_, err := call(t.Context(), ex, m, "k", func(context.Context) (T, error) { return v, nil })
	require.NoError(t, err)
	e, err := st.Lookup(t.Context(), mustKey(t, "k"))
	require.NoError(t, err)
	return ex, m, e
}

// encodesItself writes a member its type does not take: a type whose
// encoding is its method's, decoded by encoding/json's rules.
type encodesItself struct{ A string }

func (e encodesItself) MarshalJSON() ([]byte, error) {
	return []byte(`{"A":` + strconv.Quote(e.A) + `,"Added":1}`), nil
}

// TestResultShapeOfSelfEncodingTypes: a result type that encodes itself
// but decodes by encoding/json's rules, at any depth, records no shape (its
// method's output can change across a deploy while its shape does not), so
// its replays stay strict: as before, the member it adds is refused. A type
// that decodes itself too (time.Time) keeps its shape.
func TestResultShapeOfSelfEncodingTypes(t *testing.T) {
	type nested struct{ E []encodesItself }
	assert.Zero(t, parsedMeta(t, storedResultMeta(t, encodesItself{A: "x"})).ResultShape)
	assert.Zero(t, parsedMeta(t, storedResultMeta(t, nested{E: []encodesItself{{A: "x"}}})).ResultShape)
	assert.NotZero(t, parsedMeta(t, storedResultMeta(t, struct{ At time.Time }{})).ResultShape)
	_, err := replayAs[encodesItself, encodesItself](t, encodesItself{A: "x"})
	assert.ErrorIs(t, err, idem.ErrUndecodable, "strict, as before")
}

// TestResultTypeOnlyWithJSONCodec: another codec stores no result type, and
// its Unmarshal decodes every replay; a final error stores none.
func TestResultTypeOnlyWithJSONCodec(t *testing.T) {
	st := memstore.New()
	ex := idem.NewExecutor(st, idem.WithCodec(rawCodec{}), idem.SingleTenant())
	m := &idem.Method{Op: "T.M", TTL: time.Minute, Final: []idem.FinalError{{Name: "ErrRefused", Err: errRefused}}}
	_, err := call(t.Context(), ex, m, "k", func(context.Context) ([]byte, error) { return []byte("x"), nil })
	require.NoError(t, err)
	e, err := st.Lookup(t.Context(), mustKey(t, "k"))
	require.NoError(t, err)
	assert.Empty(t, e.Outcome.Meta)
	ex = idem.NewExecutor(st, idem.SingleTenant())
	_, err = call(t.Context(), ex, m, "f", func(context.Context) (int, error) { return 0, errRefused })
	require.ErrorIs(t, err, errRefused)
	e, err = st.Lookup(t.Context(), mustKey(t, "f"))
	require.NoError(t, err)
	assert.Empty(t, e.Outcome.Meta)
}

// TestReplayDecodesAsJSON: a replay on the fast path (the record names the
// result type's shape) returns what json.Unmarshal of the stored body into
// the result type returns, for every kind of result: a pointer to a struct
// (decoded without the variable escaping), a nil pointer, a pointer to a
// scalar, a named pointer type, a pointer to a pointer, a struct, a slice,
// a map, a scalar, an empty pointee.
func TestReplayDecodesAsJSON(t *testing.T) {
	type named *userV1
	u := &userV1{ID: "u1", Email: "a@b"}
	n := 7
	replays(t, u)
	replays(t, (*userV1)(nil))
	replays(t, &n)
	replays(t, (*int)(nil))
	replays(t, named(u))
	replays(t, named(nil))
	replays(t, &u)
	replays(t, *u)
	replays(t, []*userV1{u, nil})
	replays(t, map[string]int{"a": 1})
	replays(t, 42)
	replays(t, &userV1{})
	replays(t, &[]string{})
}

// replays checks that v, stored by a first call, replays as json.Unmarshal
// of its encoding into a T does.
func replays[T any](t *testing.T, v T) {
	t.Helper()
	ex, m, e := firstCall(t, v)
	require.NotEqual(t, [8]byte{}, parsedMeta(t, e.Outcome.Meta).ResultShape, "%T: the fast path", v)
	var want T
	require.NoError(t, json.Unmarshal(e.Outcome.Body, &want))
	got, err := call(t.Context(), ex, m, "k", func(context.Context) (T, error) { t.Fatal("ran again"); return v, nil })
	require.NoError(t, err)
	assert.Equal(t, want, got, "%T", v)
	assert.Equal(t, v, got, "%T", v)
}
