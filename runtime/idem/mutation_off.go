//go:build !idemmutant

package idem

import "context"

// mutated is false: planted mistakes exist only in builds with the tag
// idemmutant (mutation_on.go).
func mutated(context.Context, mutation) bool { return false }
