package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"no response: client timeout; retrying with the same key",
		`201, Idempotent-Replayed: "true"`,
		"handler executions: 1, debits of order o-1: 1",
		"422, Idempotent-Replayed",
		"application/problem+json",
		"debits of order o-2: 1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
