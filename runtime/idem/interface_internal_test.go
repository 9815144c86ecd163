package idem

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type twinA struct{ N int }

// TestInterfaceIsAFieldsEncoding: canonicalInterface(v), what
// Hasher.Interface writes for a parameter of an interface type, is byte for
// byte what an interface field holding v encodes as, so that a value is
// hashed by one rule at the top and at any depth.
func TestInterfaceIsAFieldsEncoding(t *testing.T) {
	for _, v := range []any{nil, twinA{1}, 1, int64(1), "s", []any{twinA{2}}, (*twinA)(nil), map[string]any{"k": 1.5}} {
		top, err := canonicalInterface(v)
		require.NoError(t, err)
		field, err := canonical(struct{ V any }{v})
		require.NoError(t, err)
		// struct: 'S', uvarint(1 field), then the field.
		require.True(t, bytes.HasPrefix(field, []byte{'S', 1}))
		assert.Equal(t, field[2:], top, "%#v", v)
	}
}

// TestTypeNameIsUnambiguous: a type literal with a defined type in it is
// named with the package path (reflect's String writes the package's name,
// which two packages can share); one without keeps its text.
func TestTypeNameIsUnambiguous(t *testing.T) {
	assert.Equal(t, "[]github.com/idemgen/idemgen/runtime/idem.twinA", typeName(reflectTypeOf([]twinA{})))
	assert.Equal(t, "map[string]int", typeName(reflectTypeOf(map[string]int{})))
	assert.Equal(t, "struct { N int }", typeName(reflectTypeOf(struct{ N int }{})))
	assert.Equal(t, "github.com/idemgen/idemgen/runtime/idem.twinA", typeName(reflectTypeOf(twinA{})))
	assert.Equal(t, "struct { github.com/idemgen/idemgen/runtime/idem.n int }", typeName(reflectTypeOf(struct{ n int }{})))
}

func reflectTypeOf(v any) reflect.Type { return reflect.TypeOf(v) }
