// Package dep has fields the service's package cannot reach.
package dep

// WithSecret has an unexported field.
type WithSecret struct {
	secret string
	Pub    string
}

// PReq promotes ID through an unexported embedded pointer.
type PReq struct {
	*base
	Name string
}

type base struct{ ID string }

var _ = WithSecret{secret: ""}
