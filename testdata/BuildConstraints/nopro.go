//go:build !pro

package main

import (
	"context"
	"fmt"
)

func runPro(ctx context.Context, w *IdempotentOrderService) {
	fmt.Println("not pro: no Upgrade")
}
