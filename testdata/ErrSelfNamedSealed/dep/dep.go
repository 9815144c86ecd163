// Package dep has an interface with an unexported method.
package dep

// Sealed can only be implemented in this package.
type Sealed interface{ sealed() }
