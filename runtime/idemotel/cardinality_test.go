package idemotel_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// TestOpCardinalityBounded: operations may come from requests (idemhttp
// names a request's operation by its path when it has no route pattern),
// so the idem.op values on metrics are bounded: the first WithMaxOps
// operations keep their names, every later one is counted as
// idemotel.OtherOp, and the number of metric streams stays bounded however
// many operations the callers send. Spans keep the true name.
func TestOpCardinalityBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []idemotel.Option
		max  int
		ops  int
	}{
		{"default, few ops", nil, idemotel.DefaultMaxOps, 20},
		{"default, a flood of ops", nil, idemotel.DefaultMaxOps, idemotel.DefaultMaxOps + 300},
		{"max 5", []idemotel.Option{idemotel.WithMaxOps(5)}, 5, 40},
		{"max 1", []idemotel.Option{idemotel.WithMaxOps(1)}, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := newTelemetry()
			ex := idem.NewExecutor(memstore.New(), idem.SingleTenant(), idem.WithClock(&clock{}),
				idemotel.Instrument(append(tm.opts, tc.opts...)...))
			for i := range tc.ops {
				m := &idem.Method{Op: "POST /orders/" + strconv.Itoa(i), TTL: time.Minute}
				if _, err := do(t.Context(), ex, m, "k", "p", func(context.Context) (string, error) { return "ok", nil }); err != nil {
					t.Fatal(err)
				}
			}
			ops := map[string]int{}
			for _, p := range tm.points(t) {
				for _, kv := range strings.Split(strings.SplitN(strings.SplitN(p, "{", 2)[1], "}", 2)[0], ",") {
					if v, ok := strings.CutPrefix(kv, "idem.op="); ok {
						ops[v]++
					}
				}
			}
			named := min(tc.ops, tc.max)
			want := named
			if tc.ops > tc.max {
				want++
				if ops[idemotel.OtherOp] == 0 {
					t.Errorf("no %s among the ops", idemotel.OtherOp)
				}
			}
			if len(ops) != want {
				t.Errorf("%d distinct idem.op values on metrics, want %d (%d named and the rest as %s)", len(ops), want, named, idemotel.OtherOp)
			}
			for i := range named {
				if ops["POST /orders/"+strconv.Itoa(i)] == 0 {
					t.Errorf("op %d lost its name", i)
				}
			}
			spans := strings.Join(tm.spanLines(), "\n")
			if !strings.Contains(spans, "POST /orders/"+strconv.Itoa(tc.ops-1)) {
				t.Errorf("the spans lost the op's true name")
			}
		})
	}
}

// TestWithMaxOpsValidated: a bound that is not positive is refused.
func TestWithMaxOpsValidated(t *testing.T) {
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "WithMaxOps(0)") {
			t.Errorf("panic %v, want one naming WithMaxOps(0)", p)
		}
	}()
	idemotel.Instrument(idemotel.WithMaxOps(0))
}
