package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type tenantCtxKey struct{}

// stringKeyed is a context that answers Value for string keys only, from
// keys, as gin's *gin.Context does without ContextWithFallback.
type stringKeyed struct {
	context.Context
	keys map[string]any
}

func (c stringKeyed) Value(key any) any {
	if s, ok := key.(string); ok {
		return c.keys[s]
	}
	return nil
}

// TestTenantMatrix runs the same business key for two callers through every
// tenancy of the executor and every way a door can name (or fail to name)
// the caller, and asserts the class of issue 33: no caller is ever answered
// with another's outcome, and a missing tenant runs nothing.
func TestTenantMatrix(t *testing.T) {
	type door struct {
		name string
		ctx  func(ctx context.Context, caller string) context.Context
	}
	doors := []door{
		{"no door", func(ctx context.Context, _ string) context.Context { return ctx }},
		{"door names caller", func(ctx context.Context, c string) context.Context { return idem.ContextWithTenant(ctx, c) }},
		{"door names empty", func(ctx context.Context, _ string) context.Context { return idem.ContextWithTenant(ctx, "") }},
		// A framework's context that answers Value for string keys only
		// (gin's *gin.Context without ContextWithFallback), holding the
		// door's context under idem.DoorContextKey, as idemgin sets it.
		{"door names caller, through a framework context", func(ctx context.Context, c string) context.Context {
			return stringKeyed{context.Background(), map[string]any{idem.DoorContextKey: idem.ContextWithTenant(ctx, c)}}
		}},
	}
	type tenancy struct {
		name string
		opt  idem.Option
	}
	tenancies := []tenancy{
		{"SingleTenant", idem.SingleTenant()},
		{"WithTenant(caller)", idem.WithTenant(func(ctx context.Context) string { s, _ := ctx.Value(tenantCtxKey{}).(string); return s })},
		{"WithTenant(empty)", idem.WithTenant(func(context.Context) string { return "" })},
		{"WithTenant(other)", idem.WithTenant(func(context.Context) string { return "someone-else" })},
	}
	m := &idem.Method{Op: "t.Pay", TTL: time.Hour}
	for _, d := range doors {
		for _, tn := range tenancies {
			t.Run(d.name+"/"+tn.name, func(t *testing.T) {
				ex := idem.NewExecutor(memstore.New(), tn.opt)
				runs := 0
				pay := func(caller string) (string, error) {
					ctx := context.WithValue(context.Background(), tenantCtxKey{}, caller)
					ctx = d.ctx(ctx, caller)
					return call(ctx, ex, m, "order-1", func(context.Context) (string, error) {
						runs++
						return "receipt of " + caller, nil
					})
				}
				a, errA := pay("acme")
				g, errG := pay("globex")
				switch {
				case d.name == "door names empty":
					for _, err := range []error{errA, errG} {
						if !errors.Is(err, idem.ErrMissingTenant) {
							t.Fatalf("err = %v, want ErrMissingTenant", err)
						}
					}
					if runs != 0 {
						t.Fatalf("runs = %d, want 0", runs)
					}
				case tn.name == "WithTenant(empty)" && d.name == "no door":
					if !errors.Is(errA, idem.ErrMissingTenant) || !errors.Is(errG, idem.ErrMissingTenant) || runs != 0 {
						t.Fatalf("errs %v, %v, runs %d: want ErrMissingTenant and no run", errA, errG, runs)
					}
				case tn.name == "WithTenant(other)" && strings.HasPrefix(d.name, "door names caller"):
					if !errors.Is(errA, idem.ErrTenantConflict) || !errors.Is(errG, idem.ErrTenantConflict) || runs != 0 {
						t.Fatalf("errs %v, %v, runs %d: want ErrTenantConflict and no run", errA, errG, runs)
					}
				case tn.name == "SingleTenant" && d.name == "no door",
					tn.name == "WithTenant(other)" && d.name == "no door":
					// One key space, said in the code: the second caller is
					// answered from the first's record.
					if errA != nil || errG != nil || runs != 1 || g != a {
						t.Fatalf("shared key space: %q %v, %q %v, runs %d", a, errA, g, errG, runs)
					}
				default:
					if errA != nil || errG != nil {
						t.Fatalf("errs %v, %v", errA, errG)
					}
					if a != "receipt of acme" || g != "receipt of globex" || runs != 2 {
						t.Fatalf("a caller got another's outcome: acme %q, globex %q, runs %d", a, g, runs)
					}
				}
			})
		}
	}
}

// sameContextHook returns the caller's context unchanged from StartCall.
type sameContextHook struct{}

func (sameContextHook) StartCall(ctx context.Context, _ *idem.Method, _ time.Time) (context.Context, idem.CallObserver) {
	return ctx, nil
}

// TestUncomparableContexts: a context of a type that == cannot compare (a
// framework's struct with a map, as stringKeyed) passes through every
// path of Do, a CallHook that returns it unchanged and a door context
// that names itself included, without a panic.
func TestUncomparableContexts(t *testing.T) {
	m := &idem.Method{Op: "t.Pay", TTL: time.Hour}
	inner := idem.ContextWithTenant(context.Background(), "acme")
	door := stringKeyed{context.Background(), map[string]any{idem.DoorContextKey: inner}}
	self := stringKeyed{context.Background(), map[string]any{}}
	self.keys[idem.DoorContextKey] = self
	for name, ex := range map[string]*idem.Executor{
		"plain":       idem.NewExecutor(memstore.New(), idem.SingleTenant()),
		"with a hook": idem.NewExecutor(memstore.New(), idem.SingleTenant(), idem.WithCallHook(sameContextHook{})),
	} {
		got, err := call(door, ex, m, "k", func(context.Context) (string, error) { return "ok", nil })
		if err != nil || got != "ok" {
			t.Fatalf("%s, door: %q, %v", name, got, err)
		}
		if tn, ok := idem.TenantFromContext(door); !ok || tn != "acme" {
			t.Fatalf("%s: the door's tenant %q, %v", name, tn, ok)
		}
		got, err = call(self, ex, m, "k2", func(context.Context) (string, error) { return "ok", nil })
		if err != nil || got != "ok" {
			t.Fatalf("%s, a door naming itself: %q, %v", name, got, err)
		}
	}
}
