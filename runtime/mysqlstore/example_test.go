package mysqlstore_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// openDB opens the database of $IDEM_MYSQL_DSN, a go-sql-driver/mysql DSN
// such as "app@tcp(127.0.0.1:3306)/shop". maxAllowedPacket=0 takes the
// server's limit, so that an outcome up to idem.MaxOutcomeLen (64 MiB) fits
// when the server allows it.
func openDB() *sql.DB {
	cfg, err := mysql.ParseDSN(os.Getenv("IDEM_MYSQL_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxAllowedPacket = 0
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		log.Fatal(err)
	}
	return sql.OpenDB(c)
}

// Lease mode: the claim commits first, the method runs, the outcome is
// stored. A retry with the same key replays it.
func ExampleNew() {
	ctx := context.Background()
	db := openDB()
	defer db.Close()

	store := mysqlstore.New(db) // table idem_records
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ex := idem.NewExecutor(store, idem.SingleTenant())

	// What a generated wrapper does.
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

// Transactional mode: the claim, the method's business rows (written
// through TxFrom) and the outcome commit together, or not at all.
func ExampleNewTx() {
	ctx := context.Background()
	db := openDB()
	defer db.Close()

	store := mysqlstore.NewTx(db, mysqlstore.WithTable("billing_idem_records"))
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ex := idem.NewExecutor(store, idem.SingleTenant()) // store is an idem.TxStore

	m := &idem.Method{Op: "Ledger.Credit", TTL: time.Hour, Wait: 2 * time.Second}
	var k idem.KeyParts
	k.String("req.ID", "credit-7")
	var h idem.Hasher
	h.Int(500)
	id, err := idem.Do(ctx, ex, m, &k, &h, func(ctx context.Context) (int64, error) {
		tx, _ := mysqlstore.TxFrom(ctx) // sqlc: queries.New(tx)
		res, err := tx.ExecContext(ctx, "INSERT INTO ledger (account, amount) VALUES (?, ?)", "acct-1", 500)
		if err != nil {
			return 0, err // rolled back with the claim
		}
		return res.LastInsertId()
	})
	log.Println(id, err)
}

// Expired records are removed by Sweep, paced beside the load by an
// idem.Sweeper.
func ExampleStore_Sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := openDB()
	defer db.Close()

	store := mysqlstore.New(db)
	idem.NewSweeper(store).Run(ctx) // until ctx ends
}
