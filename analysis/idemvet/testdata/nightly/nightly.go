// Package nightly has annotated methods under a build constraint.
package nightly // want `run_other\.go:9:1: missing ttl: give ttl=<duration>`

// Job runs nightly.
type Job struct{}
