package pgstore_test

import (
	"context"
	"errors"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// Lease mode: the claim commits first, the method runs, the outcome is
// stored. A retry with the same key replays it.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("IDEM_PG_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store := pgstore.New(pool) // table idem_records
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ex := idem.NewExecutor(store, idem.SingleTenant())

	// What a generated wrapper does (see IdempotentLedger in the tests).
	m := &idem.Method{Op: "Payments.Charge", TTL: 24 * time.Hour, Lease: 30 * time.Second}
	var k idem.KeyParts
	k.String("req.ID", "order-42")
	var h idem.Hasher
	h.Int(1999)
	receipt, err := idem.Do(ctx, ex, m, &k, &h, func(ctx context.Context) (string, error) {
		return "receipt-42", nil // charge the card once
	})
	log.Println(receipt, err)
}

// Transactional mode: the claim, the method's business rows and the outcome
// commit together, or not at all.
func ExampleNewTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("IDEM_PG_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store := pgstore.NewTx(pool, pgstore.WithTable("billing.idem_records"))
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ex := idem.NewExecutor(store, idem.SingleTenant()) // store is an idem.TxStore

	m := &idem.Method{Op: "Ledger.Credit", TTL: time.Hour, Wait: 2 * time.Second}
	var k idem.KeyParts
	k.String("req.ID", "credit-7")
	var h idem.Hasher
	h.Int(500)
	_, err = idem.Do(ctx, ex, m, &k, &h, func(ctx context.Context) (struct{}, error) {
		tx, _ := pgstore.TxFrom(ctx)
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 500 WHERE id = 7")
		return struct{}{}, err // an error rolls the update and the claim back
	})
	log.Println(err)
}

// Inside a method run in transactional mode, write through the call's
// transaction.
func ExampleTxFrom() {
	credit := func(ctx context.Context, account int64, amount int64) error {
		tx, ok := pgstore.TxFrom(ctx)
		if !ok {
			return errors.New("credit must run through an idempotent wrapper on pgstore.NewTx")
		}
		_, err := tx.Exec(ctx, "INSERT INTO ledger (account, amount) VALUES ($1, $2)", account, amount)
		return err
	}
	_ = credit
}

// A sweeper, one per process or several: each call removes at most the
// given number of expired records, in one short statement, and rows another
// transaction holds are skipped. Loop while a call removes the limit.
func ExampleStore_Sweep() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("IDEM_PG_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store := pgstore.New(pool, pgstore.WithArchive("idem_records_archive"))

	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for range tick.C {
		total := 0
		for {
			n, err := store.Sweep(ctx, 1000)
			total += n
			if err != nil {
				log.Print(err)
				break
			}
			if n < 1000 {
				break
			}
		}
		log.Printf("swept %d expired idempotency records", total)
	}
}
