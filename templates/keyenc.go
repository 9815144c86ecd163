package templates

import (
	"go/types"

	"github.com/dave/jennifer/jen"
)

// timeValue is the time.Time of a key part encoded by its instant: v, *v
// for a pointer (checked for nil before), time.Time(v) for a type defined
// as time.Time.
func timeValue(v *jen.Statement, t types.Type) jen.Code {
	if ptr, ok := t.Underlying().(*types.Pointer); ok {
		v, t = jen.Op("*").Add(v), ptr.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == timePath && n.Obj().Name() == "Time" {
		return v
	}
	return jen.Qual(timePath, "Time").Call(v)
}
