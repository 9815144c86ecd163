// InflightWait: a duplicate of a running call gets idem.ErrInProgress
// (inflight=reject, the default) or waits for the outcome and replays it
// (inflight=wait:d).
package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

type Exporter struct {
	started chan string
	release chan struct{}
	runs    int
}

func (e *Exporter) work(name string) string {
	e.runs++
	e.started <- name
	<-e.release
	return "exported " + name
}

//idem:key=name ttl=1h lease=1m
func (e *Exporter) Export(ctx context.Context, name string) (string, error) {
	return e.work(name), nil
}

//idem:key=name ttl=1h lease=1m inflight=wait:1m
func (e *Exporter) ExportWait(ctx context.Context, name string) (string, error) {
	return e.work(name), nil
}

func main() {
	ctx := context.Background()
	e := &Exporter{started: make(chan string), release: make(chan struct{})}
	w := NewIdempotentExporter(e, idem.NewExecutor(memstore.New(), idem.SingleTenant()))

	var wg sync.WaitGroup
	wg.Go(func() { out, err := w.Export(ctx, "report"); fmt.Println("first:", out, err) })
	<-e.started
	_, err := w.Export(ctx, "report")
	var inProgress *idem.InProgressError
	fmt.Println("duplicate, reject:", errors.Is(err, idem.ErrInProgress), errors.As(err, &inProgress))
	close(e.release)
	wg.Wait()

	e.release = make(chan struct{})
	wg.Go(func() { out, err := w.ExportWait(ctx, "report"); fmt.Println("first:", out, err) })
	<-e.started
	done := make(chan string)
	go func() {
		out, err := w.ExportWait(ctx, "report")
		done <- fmt.Sprint("duplicate, waited: ", out, " ", err)
	}()
	close(e.release)
	wg.Wait()
	fmt.Println(<-done)
	fmt.Println("runs:", e.runs)
}
