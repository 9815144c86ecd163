//go:build linux

package main

import "context"

// Notifier is declared only on linux: so is its wrapper.
type Notifier struct{ sent int }

//idem:key=user ttl=10m
func (n *Notifier) Notify(ctx context.Context, user string) (int, error) {
	n.sent++
	return n.sent, nil
}
