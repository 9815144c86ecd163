package handler

import (
	"context"
	"testing"

	"example.com/vet/billing"
)

// Tests call the raw service freely.
func TestRaw(t *testing.T) {
	svc := &billing.Service{}
	if _, err := svc.Pay(context.Background(), &billing.Order{ID: "o", Amount: 1}); err != nil {
		t.Fatal(err)
	}
}
