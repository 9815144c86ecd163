package templates

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFlatFields: structs whose fields are all of basic kinds are hashed
// field by field, every field (unexported, json:"-" and self-marshalling
// ones too: the method sees them all); the rest go to the runtime's
// canonical encoding.
func TestFlatFields(t *testing.T) {
	pkg := check(t, "example.com/fp", `package fp

import "time"

type Flat struct {
	ID      string
	Amount  int64 `+"`json:\"amount\"`"+`
	Rate    float64
	OK      bool
	Skipped string `+"`json:\"-\"`"+`
	hidden  int
}
type Cents int
type Named struct{ C Cents; U uint8 }
type Nested struct{ In Flat }
type WithTime struct{ At time.Time }
type Custom struct{ ID string }
func (Custom) MarshalJSON() ([]byte, error) { return nil, nil }
type Base struct{ ID string }
type Embedding struct{ Base }
type OnlyHidden struct{ a int }
type Stamp int
func (Stamp) MarshalText() ([]byte, error) { return nil, nil }
type HasStamp struct{ S Stamp }
`)
	names := func(typ string) []string {
		fields, ok := flatFields(pkg.Scope().Lookup(typ).Type(), pkg.Path())
		if !ok {
			return nil
		}
		var out []string
		for _, f := range fields {
			out = append(out, f.Name())
		}
		return out
	}
	assert.Equal(t, []string{"ID", "Amount", "Rate", "OK", "Skipped", "hidden"}, names("Flat"), "unexported and json:\"-\" fields are hashed too")
	assert.Equal(t, []string{"C", "U"}, names("Named"), "named basic kinds are flat")
	assert.Equal(t, []string{"ID"}, names("Custom"), "a MarshalJSON does not hide fields from the method")
	assert.Equal(t, []string{"a"}, names("OnlyHidden"))
	assert.Equal(t, []string{"S"}, names("HasStamp"))
	for _, typ := range []string{"Nested", "WithTime", "Embedding"} {
		assert.Nil(t, names(typ), "%s goes to the canonical encoding", typ)
	}
	fields, ok := flatFields(pkg.Scope().Lookup("OnlyHidden").Type(), "example.com/other")
	assert.False(t, ok, "an unexported field of another package cannot be named: %v", fields)
}
