//go:build !linux

package main

import (
	"context"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
)

func runLinux(ctx context.Context, w *IdempotentOrderService, ex *idem.Executor) {
	fmt.Println("not linux: no Ship, no Notifier")
}
