package templates

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFlatFields: only structs whose JSON-visible fields are all of basic
// kinds, and that do not marshal themselves, are hashed field by field; the
// rest keep the JSON fingerprint, which sees what encoding/json sees.
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
		fields, ok := flatFields(pkg.Scope().Lookup(typ).Type())
		if !ok {
			return nil
		}
		var out []string
		for _, f := range fields {
			out = append(out, f.Name())
		}
		return out
	}
	assert.Equal(t, []string{"ID", "Amount", "Rate", "OK"}, names("Flat"), "unexported and json:\"-\" fields are skipped, as JSON skips them")
	assert.Equal(t, []string{"C", "U"}, names("Named"), "named basic kinds are flat")
	for _, typ := range []string{"Nested", "WithTime", "Custom", "Embedding", "OnlyHidden", "HasStamp"} {
		assert.Nil(t, names(typ), "%s keeps the JSON fingerprint", typ)
	}
}
