package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/sqlitestore"
)

// A service on one node keeps its outcomes in a SQLite file: a retry after
// a restart replays the first call's result instead of charging again.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "sqlitestore-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "idem.db")
	ctx := context.Background()
	m := idem.Method{Op: "payments.Charge", TTL: 24 * time.Hour}
	charge := func(ex *idem.Executor, orderID string, cents int64) (string, error) {
		var k idem.KeyParts
		k.String("order.ID", orderID)
		var h idem.Hasher
		h.Int(cents)
		return idem.Do(ctx, ex, &m, &k, &h, func(context.Context) (string, error) {
			fmt.Println("charging", orderID)
			return "receipt-" + orderID, nil
		})
	}

	for restart := range 2 {
		db, err := sqlitestore.Open(path)
		if err != nil {
			fmt.Println(err)
			return
		}
		store := sqlitestore.New(db)
		if err := store.Migrate(ctx); err != nil {
			fmt.Println(err)
			return
		}
		receipt, err := charge(idem.NewExecutor(store, idem.SingleTenant()), "o-1", 1999)
		fmt.Println(restart, receipt, err)
		_ = db.Close()
	}
	// Output:
	// charging o-1
	// 0 receipt-o-1 <nil>
	// 1 receipt-o-1 <nil>
}

// In transactional mode the method writes its rows through TxFrom: they
// commit together with the outcome, or not at all.
func ExampleNewTx() {
	dir, _ := os.MkdirTemp("", "sqlitestore-example")
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	store := sqlitestore.NewTx(db)
	if err := store.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER)`); err != nil {
		fmt.Println(err)
		return
	}
	ex := idem.NewExecutor(store, idem.SingleTenant())
	m := idem.Method{Op: "orders.Place", TTL: time.Hour}
	place := func(id string, cents int64) (int64, error) {
		var k idem.KeyParts
		k.String("order.ID", id)
		var h idem.Hasher
		h.Int(cents)
		return idem.Do(ctx, ex, &m, &k, &h, func(ctx context.Context) (int64, error) {
			tx, _ := sqlitestore.TxFrom(ctx)
			res, err := tx.ExecContext(ctx, `INSERT INTO orders (id, cents) VALUES (?, ?)`, id, cents)
			if err != nil {
				return 0, err
			}
			return res.LastInsertId()
		})
	}
	first, err := place("o-1", 500)
	fmt.Println(first, err)
	again, err := place("o-1", 500)
	fmt.Println(again, err)
	var n int
	_ = db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// 1 <nil>
	// 1 <nil>
	// orders: 1
}

// Sweep removes expired records in bounded batches; a caller loops while a
// call removes its whole limit.
func ExampleStore_Sweep() {
	dir, _ := os.MkdirTemp("", "sqlitestore-example")
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "idem.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	store := sqlitestore.New(db)
	if err := store.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for i := range 12 {
		k, _ := idem.NewKey("", "example.Op", fmt.Sprint(i))
		_, _ = store.Claim(ctx, idem.ClaimRequest{Key: k, Token: 1, Lease: time.Second, TTL: time.Minute})
	}
	// An hour later (a clock moved forward here), every record has expired.
	later := sqlitestore.New(db, sqlitestore.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	total := 0
	for {
		n, err := later.Sweep(ctx, 5)
		if err != nil {
			fmt.Println(err)
			return
		}
		total += n
		if n < 5 {
			break
		}
	}
	fmt.Println("removed", total)
	// Output: removed 12
}
