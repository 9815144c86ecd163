package main

import (
	"context"
	"fmt"

	"example.com/shop/shop"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func main() {
	raw := &shop.Service{}
	svc := shop.NewIdempotentService(raw, idem.NewExecutor(memstore.New()))
	a, err1 := svc.Charge(context.Background(), "o1")
	b, err2 := raw.Charge(context.Background(), "o1")
	fmt.Println(a, b, err1, err2)
}
