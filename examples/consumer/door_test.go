package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/examples/consumer/points"
	"github.com/idemgen/idemgen/internal/testenv/everystore"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// publishAs publishes msg on the story's subject with a Tenant header
// (none when tenant is ""), without Nats-Msg-Id.
func publishAs(t *testing.T, b *broker, story, tenant string, msg points.Message) {
	t.Helper()
	data, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	nm := &nats.Msg{Subject: "shipments." + story, Data: data, Header: nats.Header{}}
	if tenant != "" {
		nm.Header.Set("Tenant", tenant)
	}
	if _, err := b.js.PublishMsg(t.Context(), nm); err != nil {
		t.Fatal(err)
	}
}

func testBroker(t *testing.T) *broker {
	b, err := startBroker(t.Context(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	return b
}

// deliverNext fetches the consumer's next delivery and runs the door on it.
func deliverNext(t *testing.T, b *broker, c jetstream.Consumer, d *Door) Verdict {
	t.Helper()
	m, err := b.next(c)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := d.Deliver(t.Context(), m)
	return v
}

// TestDoorTenants (issue 33, class 1, for the consumer door): the tenant a
// delivery names reaches the wrapper below the door, on a SingleTenant
// executor: two tenants' identical messages (same ID, same content) are two
// effects, a redelivery of one replays, and a delivery without a tenant is
// terminated, not handled in a shared key space. It runs on every store
// (everystore: memstore, pgstore and mysqlstore in both modes, redisstore,
// tiered), a missing server skipping its subtest (failing it under CI=true).
func TestDoorTenants(t *testing.T) {
	everystore.Run(t, "consumer_tenants_", func(t *testing.T, newStore everystore.NewStore) {
		b := testBroker(t)
		ledger := points.NewLedger()
		svc := points.NewIdempotentService(&points.Service{Ledger: ledger}, idem.NewExecutor(newStore(t), idem.SingleTenant()))
		d := &Door{Handle: svc.HandleShipment, Tenant: func(m jetstream.Msg) string { return m.Headers().Get("Tenant") },
			NakDelay: 10 * time.Millisecond, Log: quiet}
		c, err := b.consumer(t.Context(), "tenants", 5)
		if err != nil {
			t.Fatal(err)
		}
		// Fresh IDs: the stores on servers outlive the test.
		suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
		msg := points.Message{ID: "ship-" + suffix, OrderID: "O-" + suffix, Points: 10}
		tenants := []string{"acme", "globex", "acme", ""}
		for _, tenant := range tenants {
			publishAs(t, b, "tenants", tenant, msg)
		}
		var got []Verdict
		for range tenants {
			got = append(got, deliverNext(t, b, c, d))
		}
		if want := []Verdict{Acked, Acked, Acked, Termed}; !slices.Equal(got, want) {
			t.Errorf("verdicts %v, want %v", got, want)
		}
		if n := ledger.Credits(msg.OrderID); n != 2 {
			t.Errorf("credited %d times, want 2 (once per tenant; globex must not get acme's outcome)", n)
		}
	})
}

// TestDoorPanic (issue 35, class 6): a handler that panics inside the
// Consume callback does not kill the callback, the subscription or the
// process: the door recovers, the executor has released the key, the
// delivery is naked, and its redelivery runs the handler again; the other
// messages go on being consumed.
func TestDoorPanic(t *testing.T) {
	b := testBroker(t)
	ex := idem.NewExecutor(memstore.New(), idem.SingleTenant())
	m := idem.Method{Op: "test.credit", TTL: time.Hour}
	ledger := points.NewLedger()
	var panicked atomic.Bool
	d := &Door{NakDelay: 10 * time.Millisecond, Log: quiet, Handle: func(ctx context.Context, msg points.Message) error {
		var k idem.KeyParts
		k.String("id", msg.ID)
		var h idem.Hasher
		h.String(msg.ID)
		_, err := idem.Do(ctx, ex, &m, &k, &h, func(context.Context) (struct{}, error) {
			if msg.OrderID == "boom" && panicked.CompareAndSwap(false, true) {
				panic("a bug on the first delivery")
			}
			ledger.Credit(msg.OrderID, msg.Points)
			return struct{}{}, nil
		})
		return err
	}}
	c, err := b.consumer(t.Context(), "panic", 5)
	if err != nil {
		t.Fatal(err)
	}
	verdicts := make(chan string, 16)
	cc, err := c.Consume(func(jm jetstream.Msg) {
		v, _ := d.Deliver(t.Context(), jm)
		var msg points.Message
		_ = json.Unmarshal(jm.Data(), &msg)
		verdicts <- msg.OrderID + ":" + string(v)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	publishAs(t, b, "panic", "", points.Message{ID: "m-boom", OrderID: "boom", Points: 1})
	publishAs(t, b, "panic", "", points.Message{ID: "m-ok", OrderID: "ok", Points: 1})
	var got []string
	hang := time.After(30 * time.Second) // a hang guard only
	for len(got) < 3 {
		select {
		case v := <-verdicts:
			got = append(got, v)
		case <-hang:
			t.Fatalf("verdicts so far %v: the consumer stopped", got)
		}
	}
	slices.Sort(got)
	if want := []string{"boom:ack", "boom:nak", "ok:ack"}; !slices.Equal(got, want) {
		t.Errorf("verdicts %v, want %v", got, want)
	}
	if ledger.Credits("boom") != 1 || ledger.Credits("ok") != 1 {
		t.Errorf("credits boom %d, ok %d; want 1 each", ledger.Credits("boom"), ledger.Credits("ok"))
	}
}

// TestRedriveAfterFinal (issue 35, class 6): a message that ended in a
// final error is terminated; a redrive of it replays that error for the
// record's whole TTL, even once its cause is fixed, without running the
// handler; the documented redrive (docs/CONSUMERS.md: idemctl forget the
// FAILED_FINAL record first, here through idem.Admin as idemctl does) runs
// it again, once.
func TestRedriveAfterFinal(t *testing.T) {
	b := testBroker(t)
	store := memstore.New()
	ex := idem.NewExecutor(store, idem.SingleTenant())
	m := idem.Method{Op: "test.credit-final", TTL: time.Hour}
	ledger := points.NewLedger()
	var fixed atomic.Bool
	var runs atomic.Int64
	d := &Door{NakDelay: 10 * time.Millisecond, Log: quiet, Handle: func(ctx context.Context, msg points.Message) error {
		var k idem.KeyParts
		k.String("id", msg.ID)
		var h idem.Hasher
		h.String(msg.ID)
		_, err := idem.Do(ctx, ex, &m, &k, &h, func(context.Context) (struct{}, error) {
			runs.Add(1)
			if !fixed.Load() {
				return struct{}{}, idem.Final(errors.New("order O-9 is closed"))
			}
			ledger.Credit(msg.OrderID, msg.Points)
			return struct{}{}, nil
		})
		return err
	}}
	c, err := b.consumer(t.Context(), "final", 5)
	if err != nil {
		t.Fatal(err)
	}
	msg := points.Message{ID: "ship-9", OrderID: "O-9", Points: 5}
	publishAs(t, b, "final", "", msg)
	if v := deliverNext(t, b, c, d); v != Termed {
		t.Fatalf("a final error: %v, want %v", v, Termed)
	}
	fixed.Store(true)                 // the operator fixes the cause (reopens the order)
	publishAs(t, b, "final", "", msg) // and redrives the dead letter
	if v := deliverNext(t, b, c, d); v != Termed || runs.Load() != 1 {
		t.Fatalf("a redrive without forget: %v after %d runs, want the stored final error replayed (%v, 1 run)", v, runs.Load(), Termed)
	}
	// idemctl list --op test.credit-final --status FAILED_FINAL; idemctl forget KEY --token N --status FAILED_FINAL
	admin, err := idem.NewAdmin(store, idem.WithAdminLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	page, err := admin.List(t.Context(), idem.ListQuery{Op: m.Op, Status: idem.StatusFailedFinal})
	if err != nil || len(page.Entries) != 1 {
		t.Fatalf("list: %v, %d entries", err, len(page.Entries))
	}
	e := page.Entries[0]
	if err := admin.Forget(t.Context(), idem.ForgetRequest{Key: e.Key, Token: e.Token, Status: e.Status, By: "operator", Reason: "redrive of ship-9"}); err != nil {
		t.Fatal(err)
	}
	publishAs(t, b, "final", "", msg)
	if v := deliverNext(t, b, c, d); v != Acked || runs.Load() != 2 || ledger.Credits("O-9") != 1 {
		t.Errorf("the redrive after forget: %v, %d runs, %d credits; want %v, 2, 1", v, runs.Load(), ledger.Credits("O-9"), Acked)
	}
}
