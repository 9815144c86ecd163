// Package idem is the service's own package that happens to be named idem,
// like the runtime.
package idem

// Ticket is a support ticket.
type Ticket struct {
	ID    string
	Title string
}
