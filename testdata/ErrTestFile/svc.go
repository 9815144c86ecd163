// ErrTestFile: an annotation in a _test.go file would do nothing (idemgen
// wraps non-test files only): it is refused at its position.
package svc

// S is a service.
type S struct{}
