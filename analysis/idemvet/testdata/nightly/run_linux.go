//go:build linux

package nightly

import "context"

// Run runs once per day.
//
//idem:key=nope // want `missing ttl: give ttl=<duration>` `key: nope is not a parameter of Job\.Run`
func (j *Job) Run(ctx context.Context, day string) error { return nil }
