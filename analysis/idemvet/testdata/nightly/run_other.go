//go:build !linux

package nightly

import "context"

// Run runs once per day.
//
//idem:key=day
func (j *Job) Run(ctx context.Context, day string) error { return nil }
