package templates

import (
	"go/types"
)

// timeValue is the time.Time of a key part encoded by its instant: v, *v
// for a pointer (checked for nil before), time.Time(v) for a type defined
// as time.Time.
func (g *gen) timeValue(v string, t types.Type) string {
	if ptr, ok := t.Underlying().(*types.Pointer); ok {
		v, t = "*"+v, ptr.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == timePath && n.Obj().Name() == "Time" {
		return v
	}
	return g.qual(timePath, "Time") + "(" + v + ")"
}

// sentinels lists the package's other exported error variables, so that a
// replayed idem.Final error keeps errors.Is for them:
//
//	Sentinels: []idem.FinalError{
//		{Name: "ErrCardDeclined", Err: ErrCardDeclined},
//		{Name: "ErrTimeout", Err: ErrTimeout},
//	},
func (mg *methodGen) sentinels() keyValue {
	return keyValue{"Sentinels", block("[]"+mg.rt("FinalError"), mg.finalErrors(mg.m.Sentinels))}
}
