// Command consumer plays the at-least-once stories of a message consumer
// against a real NATS JetStream server, started in-process, and prints per
// message how many times its side effect happened: once with the consumer
// wrapped by idemgen (points.IdempotentService, keyed by the message ID),
// and again with the bare consumer, which shows the duplicates.
//
//	go run .            # from examples/consumer (or make demo-consumer)
//	go run . -ackwait 5s
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/examples/consumer/points"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/memstore"
)

func main() {
	ackWait := flag.Duration("ackwait", 2*time.Second, "the consumers' AckWait: how long JetStream waits for an ack before it redelivers")
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *ackWait); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

// Story names, in the order they are played.
const (
	storyProducerRetry = "producer retry (same Nats-Msg-Id)"
	storyCrash         = "crash after the effect, before the ack"
	storyNak           = "Nak on a transient error after the effect"
	storyRedrive       = "dead-lettered, then redriven"
)

// Counts maps each story to the number of times its message's effect
// happened.
type Counts map[string]int

// Result is what the demo measured: the counts with idemgen and without.
type Result struct {
	With, Without Counts
}

func run(ctx context.Context, out io.Writer, ackWait time.Duration) (Result, error) {
	fmt.Fprintf(out, "idemgen consumer demo: NATS JetStream %s in-process, AckWait %v\n", server.VERSION, ackWait)
	var res Result
	var err error
	fmt.Fprintln(out, "\nwith idemgen: points.IdempotentService, keyed by the message ID (//idem:key=msg.ID), memory store")
	ledger := points.NewLedger()
	svc := points.NewIdempotentService(&points.Service{Ledger: ledger}, idem.NewExecutor(memstore.New(), idem.SingleTenant()))
	if res.With, err = play(ctx, out, ackWait, svc.HandleShipment, ledger); err != nil {
		return res, err
	}
	fmt.Fprintln(out, "\nwithout idemgen: the bare points.Service")
	ledger = points.NewLedger()
	bare := &points.Service{Ledger: ledger}
	if res.Without, err = play(ctx, out, ackWait, bare.HandleShipment, ledger); err != nil {
		return res, err
	}
	fmt.Fprintln(out, "\neffects per message (each message's points credited how many times):")
	fmt.Fprintf(out, "   %-44s %8s %8s\n", "story", "idemgen", "without")
	for _, s := range []string{storyProducerRetry, storyCrash, storyNak, storyRedrive} {
		fmt.Fprintf(out, "   %-44s %8d %8d\n", s, res.With[s], res.Without[s])
	}
	return res, nil
}

// handler is the consumer's business method, wrapped or not.
type handler func(ctx context.Context, msg points.Message) error

// broker is one in-process JetStream server, a connection and the stream.
type broker struct {
	ns      *server.Server
	dir     string
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	ackWait time.Duration
}

const streamName = "SHIPMENTS"

func startBroker(ctx context.Context, ackWait time.Duration) (*broker, error) {
	dir, err := os.MkdirTemp("", "idemgen-jetstream-")
	if err != nil {
		return nil, err
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("nats server: %w", err)
	}
	ns.Start()
	b := &broker{ns: ns, dir: dir, ackWait: ackWait}
	if !ns.ReadyForConnections(30 * time.Second) {
		b.close()
		return nil, errors.New("nats server: not ready after 30s")
	}
	stop := func(err error) (*broker, error) { b.close(); return nil, err }
	if b.nc, err = nats.Connect(ns.ClientURL()); err != nil {
		return stop(err)
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		return stop(err)
	}
	b.stream, err = b.js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{"shipments.>"},
		Duplicates: 2 * time.Minute})
	if err != nil {
		return stop(fmt.Errorf("create stream: %w", err))
	}
	return b, nil
}

func (b *broker) close() {
	if b.nc != nil {
		b.nc.Close()
	}
	b.ns.Shutdown()
	b.ns.WaitForShutdown()
	_ = os.RemoveAll(b.dir)
}

// consumer creates the durable pull consumer of one story.
func (b *broker) consumer(ctx context.Context, name string, maxDeliver int) (jetstream.Consumer, error) {
	return b.js.CreateOrUpdateConsumer(ctx, streamName, jetstream.ConsumerConfig{
		Durable: name, FilterSubject: "shipments." + name, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: b.ackWait, MaxDeliver: maxDeliver,
	})
}

// publish sends msg on the story's subject, with Nats-Msg-Id set to the
// message ID when msgID is true, and reports whether the broker dropped it
// as a duplicate.
func (b *broker) publish(ctx context.Context, story string, msg points.Message, msgID bool) (duplicate bool, err error) {
	data, err := json.Marshal(msg)
	if err != nil {
		return false, err
	}
	var opts []jetstream.PublishOpt
	if msgID {
		opts = append(opts, jetstream.WithMsgID(msg.ID))
	}
	ack, err := b.js.Publish(ctx, "shipments."+story, data, opts...)
	if err != nil {
		return false, fmt.Errorf("publish %s: %w", msg.ID, err)
	}
	return ack.Duplicate, nil
}

// next waits for the consumer's next delivery (a redelivery after AckWait
// included).
func (b *broker) next(c jetstream.Consumer) (jetstream.Msg, error) {
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(10*b.ackWait+10*time.Second))
	if err != nil {
		return nil, err
	}
	for m := range batch.Messages() {
		return m, nil
	}
	if err := batch.Error(); err != nil {
		return nil, err
	}
	return nil, errors.New("no delivery before the fetch timed out")
}

// handle decodes one delivery and runs h on it; it does not ack.
func handle(ctx context.Context, h handler, m jetstream.Msg) (points.Message, uint64, error) {
	var msg points.Message
	if err := json.Unmarshal(m.Data(), &msg); err != nil {
		return msg, 0, fmt.Errorf("decode: %w", err)
	}
	md, err := m.Metadata()
	if err != nil {
		return msg, 0, err
	}
	return msg, md.NumDelivered, h(ctx, msg)
}

func play(ctx context.Context, out io.Writer, ackWait time.Duration, h handler, ledger *points.Ledger) (Counts, error) {
	b, err := startBroker(ctx, ackWait)
	if err != nil {
		return nil, err
	}
	defer b.close()
	counts := Counts{}
	stories := []struct {
		name  string
		order string
		play  func(context.Context, io.Writer, *broker, handler, points.Message) error
	}{
		{storyProducerRetry, "O-1", producerRetry},
		{storyCrash, "O-2", crashBeforeAck},
		{storyNak, "O-3", nakTransient},
		{storyRedrive, "O-4", redrive},
	}
	for i, s := range stories {
		fmt.Fprintf(out, "%d. %s\n", i+1, s.name)
		msg := points.Message{ID: fmt.Sprintf("ship-%d", i+1), OrderID: s.order, Points: 10 * (i + 1)}
		if err := s.play(ctx, out, b, h, msg); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		counts[s.name] = ledger.Credits(s.order)
		fmt.Fprintf(out, "   => order %s credited %d time(s), %d points (one message of %d points)\n",
			s.order, ledger.Credits(s.order), ledger.Points(s.order), msg.Points)
	}
	return counts, nil
}

// deliver fetches the next message of c, handles it and says so: "delivery
// N" followed by what.
func deliver(ctx context.Context, out io.Writer, b *broker, c jetstream.Consumer, h handler, what string) (jetstream.Msg, error) {
	m, err := b.next(c)
	if err != nil {
		return nil, err
	}
	_, n, err := handle(ctx, h, m)
	if err != nil {
		return nil, err
	}
	say(out, "delivery %d%s", n, what)
	return m, nil
}

func say(out io.Writer, format string, args ...any) { fmt.Fprintf(out, "   "+format+"\n", args...) }

// producerRetry: the producer publishes twice (its first PubAck was lost);
// the broker's Nats-Msg-Id window drops the second copy. This is what
// broker-side deduplication covers, with or without idemgen.
func producerRetry(ctx context.Context, out io.Writer, b *broker, h handler, msg points.Message) error {
	c, err := b.consumer(ctx, "retry", 5)
	if err != nil {
		return err
	}
	for i := range 2 {
		dup, err := b.publish(ctx, "retry", msg, true)
		if err != nil {
			return err
		}
		say(out, "publish %d of %s: duplicate=%v", i+1, msg.ID, dup)
	}
	m, err := deliver(ctx, out, b, c, h, ": handled, acked")
	if err != nil {
		return err
	}
	return m.Ack()
}

// crashBeforeAck: the consumer credits the points and dies before it acks;
// JetStream redelivers after AckWait to the restarted consumer.
func crashBeforeAck(ctx context.Context, out io.Writer, b *broker, h handler, msg points.Message) error {
	c, err := b.consumer(ctx, "crash", 5)
	if err != nil {
		return err
	}
	if _, err := b.publish(ctx, "crash", msg, true); err != nil {
		return err
	}
	if _, err := deliver(ctx, out, b, c, h, ": handled, then the consumer crashed before the ack"); err != nil {
		return err
	}
	m, err := deliver(ctx, out, b, c, h, " (after AckWait): handled, acked")
	if err != nil {
		return err
	}
	return m.Ack()
}

// nakTransient: the points are credited, then the follow-up publish of a
// "points credited" event fails (the broker connection blipped), so the
// consumer Naks; the redelivery runs the handler again and the follow-up
// succeeds.
func nakTransient(ctx context.Context, out io.Writer, b *broker, h handler, msg points.Message) error {
	c, err := b.consumer(ctx, "nak", 5)
	if err != nil {
		return err
	}
	if _, err := b.publish(ctx, "nak", msg, true); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		m, err := b.next(c)
		if err != nil {
			return err
		}
		_, n, err := handle(ctx, h, m)
		if err != nil {
			return err
		}
		if attempt == 1 {
			say(out, "delivery %d: handled, the follow-up event failed (transient): Nak", n)
			if err := m.Nak(); err != nil {
				return err
			}
			continue
		}
		say(out, "delivery %d: handled, follow-up published, acked", n)
		return m.Ack()
	}
}

// redrive: the consumer credits the points and crashes before the ack on
// both deliveries MaxDeliver allows; JetStream gives up and announces the
// dead letter (a MAX_DELIVERIES advisory). Later an operator redrives it:
// the message is read back from the stream and published again.
func redrive(ctx context.Context, out io.Writer, b *broker, h handler, msg points.Message) error {
	const name = "redrive"
	advisories := make(chan *nats.Msg, 4)
	sub, err := b.nc.ChanSubscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+streamName+"."+name, advisories)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	c, err := b.consumer(ctx, name, 2)
	if err != nil {
		return err
	}
	if _, err := b.publish(ctx, name, msg, true); err != nil {
		return err
	}
	for range 2 {
		m, err := b.next(c)
		if err != nil {
			return err
		}
		if _, n, err := handle(ctx, h, m); err != nil {
			return err
		} else {
			say(out, "delivery %d: handled, then the consumer crashed before the ack", n)
		}
	}
	// A pull request must be waiting for the broker to find the delivery
	// limit reached; it then gets the redriven message.
	type got struct {
		m   jetstream.Msg
		err error
	}
	fetched := make(chan got, 1)
	go func() { m, err := b.next(c); fetched <- got{m, err} }()
	var adv struct {
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
	}
	select {
	case a := <-advisories:
		if err := json.Unmarshal(a.Data, &adv); err != nil {
			return fmt.Errorf("advisory: %w", err)
		}
	case <-time.After(10*b.ackWait + 10*time.Second):
		return errors.New("no MAX_DELIVERIES advisory")
	}
	say(out, "dead-lettered: stream sequence %d after %d deliveries (MAX_DELIVERIES advisory)", adv.StreamSeq, adv.Deliveries)
	raw, err := b.stream.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		return fmt.Errorf("read dead letter: %w", err)
	}
	var dead points.Message
	if err := json.Unmarshal(raw.Data, &dead); err != nil {
		return err
	}
	// Republished with its Nats-Msg-Id, inside the duplicate window, the
	// redrive would be dropped: the broker's window cannot tell a redrive
	// from a producer retry. The operator republishes without it.
	if dup, err := b.publish(ctx, name, dead, true); err != nil {
		return err
	} else {
		say(out, "redrive with the original Nats-Msg-Id: duplicate=%v (dropped by the broker's window)", dup)
	}
	if _, err := b.publish(ctx, name, dead, false); err != nil {
		return err
	}
	say(out, "redrive without Nats-Msg-Id: published")
	g := <-fetched
	if g.err != nil {
		return g.err
	}
	if _, n, err := handle(ctx, h, g.m); err != nil {
		return err
	} else {
		say(out, "redriven delivery %d: handled, acked", n)
	}
	return g.m.Ack()
}
