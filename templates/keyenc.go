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

// sentinels lists the package's other exported error variables, so that a
// replayed idem.Final error keeps errors.Is for them:
//
//	Sentinels: []idem.FinalError{
//		{Name: "ErrCardDeclined", Err: ErrCardDeclined},
//		{Name: "ErrTimeout", Err: ErrTimeout},
//	},
func (mg *methodGen) sentinels() jen.Code {
	var items []jen.Code
	for _, s := range mg.m.Sentinels {
		items = append(items, jen.Values(jen.Id("Name").Op(":").Lit(s.Name), jen.Id("Err").Op(":").Add(mg.finalVar(s))))
	}
	return jen.Id("Sentinels").Op(":").Index().Add(mg.rt("FinalError")).Custom(jen.Options{
		Open: "{", Close: "}", Separator: ",", Multi: true,
	}, items...)
}
