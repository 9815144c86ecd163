// Package dep has requests whose fields are promoted from unexported
// embedded structs.
package dep

// Req promotes ID and Seq from an unexported embedded struct.
type Req struct {
	base
	Name string
}

type base struct {
	ID  string
	Seq int64
	In  *Inner
}

// Inner is reached through base.
type Inner struct{ Code string }

// NewReq returns a request.
func NewReq(id string, seq int64, in *Inner) Req { return Req{base: base{ID: id, Seq: seq, In: in}} }
