// HashSubset: hash= names the parameters that form the fingerprint; the
// others (a trace ID) may differ between retries. hash=none compares none.
package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type Notifier struct{ sent int }

//idem:key=userID ttl=1h hash=userID,text,urgent
func (n *Notifier) Notify(ctx context.Context, userID int, text string, traceID string, urgent bool, weight float64) (int, error) {
	n.sent++
	return n.sent, nil
}

//idem:key=userID ttl=1h hash=none
func (n *Notifier) Ping(ctx context.Context, userID int, text string) (int, error) {
	n.sent++
	return n.sent, nil
}

func main() {
	ctx := context.Background()
	n := &Notifier{}
	w := NewIdempotentNotifier(n, idem.NewExecutor(memstore.New(), idem.SingleTenant()))

	r, err := w.Notify(ctx, 1, "hello", "trace-a", false, 1)
	fmt.Println("notify:", r, err)
	r, err = w.Notify(ctx, 1, "hello", "trace-b", false, 2)
	fmt.Println("other trace and weight (not hashed), replayed:", r, err)
	_, err = w.Notify(ctx, 1, "hello!", "trace-c", false, 1)
	fmt.Println("other text:", errors.Is(err, idem.ErrPayloadMismatch))
	_, err = w.Notify(ctx, 1, "hello", "trace-c", true, 1)
	fmt.Println("other urgency:", errors.Is(err, idem.ErrPayloadMismatch))

	r, err = w.Ping(ctx, 1, "a")
	fmt.Println("ping:", r, err)
	r, err = w.Ping(ctx, 1, "b")
	fmt.Println("ping with other text (hash=none), replayed:", r, err)
	fmt.Println("sent:", n.sent)
}
