package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/shop/orders"
	"github.com/idemgen/idemgen/examples/shop/shopdb"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// shop is the service on a pool of conns connections, with an idempotency
// table of its own, served over real HTTP.
type shop struct {
	t     testing.TB
	pool  *pgxpool.Pool
	table string
	srv   *httptest.Server
	svc   *orders.Service // unwrapped, for setting the scene
}

func newShop(t testing.TB, conns int32, more ...func(http.Handler) http.Handler) *shop {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	table := "shop_idem_" + randHex(4)
	ex, svc, err := setup(context.Background(), pool, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize())
	})
	srv := httptest.NewServer(router(ex, svc, more...))
	t.Cleanup(srv.Close)
	return &shop{t: t, pool: pool, table: table, srv: srv, svc: orders.NewService(pool)}
}

type reply struct {
	status   int
	replayed bool
	body     string
	order    shopdb.Order
}

func (s *shop) post(path, key, body string) reply {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set(idemhttp.Header, key)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, replayed: resp.Header.Get(idemhttp.ReplayedHeader) == "true", body: string(b)}
	_ = json.Unmarshal(b, &r.order)
	return r
}

func place(cart string, amount int64) string {
	return fmt.Sprintf(`{"cart_id":%q,"customer":"ada","amount":%d}`, cart, amount)
}

// orderRows counts the orders of cart.
func (s *shop) orderRows(cart string) int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), "SELECT count(*) FROM shop_orders WHERE cart_id = $1", cart).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

// records counts the idempotency records, of both layers.
func (s *shop) records() int {
	s.t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{s.table}.Sanitize()).Scan(&n); err != nil {
		s.t.Fatal(err)
	}
	return n
}

// burst places n orders concurrently, with distinct keys and carts.
func (s *shop) burst(n int) []reply {
	run := randHex(4)
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			replies[i] = s.post("/orders", fmt.Sprintf("key-%s-%d", run, i), place(fmt.Sprintf("cart-%s-%d", run, i), 10))
		})
	}
	wg.Wait()
	return replies
}

// TestShopConcurrentPool: N concurrent requests through both layers
// (idemhttp, then the generated wrapper, on one pgstore.NewTx) on a pool
// of N connections are all served, each with one acquisition of the pool
// (one connection, one transaction), and both records of each commit.
func TestShopConcurrentPool(t *testing.T) {
	const n = 8
	s := newShop(t, n)
	before := s.pool.Stat().AcquireCount()
	for i, r := range s.burst(n) {
		if r.status != http.StatusCreated {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	if got := s.pool.Stat().AcquireCount() - before; got != n {
		t.Fatalf("%d acquisitions of the pool for %d requests, want one each", got, n)
	}
	if got := s.records(); got != 2*n {
		t.Fatalf("%d records, want %d (edge and wrapper)", got, 2*n)
	}
}

// TestShopFaultBetweenRecords: the connection is lost after the wrapper
// stored its outcome and before idemhttp commits its own: the client gets
// 503, and neither record nor the order exists; the retry places it once.
func TestShopFaultBetweenRecords(t *testing.T) {
	var armed sync.Mutex
	fault := true
	killer := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r) // the wrapper ran: its record is written, not committed
			armed.Lock()
			defer armed.Unlock()
			if !fault {
				return
			}
			fault = false
			tx, ok := pgstore.TxFrom(r.Context())
			if !ok {
				t.Error("no idempotency transaction in the handler's context")
				return
			}
			var pid int32
			if err := tx.QueryRow(r.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Error(err)
				return
			}
			conn, err := pgx.Connect(context.Background(), testenv.PostgresDSN(t))
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid); err != nil {
				t.Error(err)
			}
		})
	}
	s := newShop(t, 2, killer)
	cart, key := "cart-"+randHex(4), "key-"+randHex(4)
	if r := s.post("/orders", key, place(cart, 10)); r.status != http.StatusServiceUnavailable {
		t.Fatalf("with the fault: %d %s, want 503", r.status, r.body)
	}
	if s.orderRows(cart) != 0 || s.records() != 0 {
		t.Fatalf("after the fault: %d orders, %d records, want none", s.orderRows(cart), s.records())
	}
	r := s.post("/orders", key, place(cart, 10))
	if r.status != http.StatusCreated || r.replayed {
		t.Fatalf("retry: %d replayed=%v %s", r.status, r.replayed, r.body)
	}
	if s.orderRows(cart) != 1 || s.records() != 2 {
		t.Fatalf("after the retry: %d orders, %d records, want 1 and 2", s.orderRows(cart), s.records())
	}
}

// TestShopLayers: what each layer catches, and the one rule for replays.
func TestShopLayers(t *testing.T) {
	s := newShop(t, 2)
	cart := "cart-" + randHex(4)

	first := s.post("/orders", "k1-"+cart, place(cart, 10))
	if first.status != http.StatusCreated {
		t.Fatalf("place: %d %s", first.status, first.body)
	}
	// The edge: the same key, another body.
	if r := s.post("/orders", "k1-"+cart, place(cart, 11)); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `#key-reused"`) {
		t.Fatalf("key reused: %d %s", r.status, r.body)
	}
	// The business layer: another key for the same cart gets the same
	// order (one row), and another content for the cart is refused with
	// the business key's problem (idemhttp.WriteError), not the
	// Idempotency-Key's.
	second := s.post("/orders", "k2-"+cart, place(cart, 10))
	if second.status != http.StatusCreated || second.order.ID != first.order.ID || s.orderRows(cart) != 1 {
		t.Fatalf("second key: %d order %d (first %d), %d rows", second.status, second.order.ID, first.order.ID, s.orderRows(cart))
	}
	if r := s.post("/orders", "k3-"+cart, place(cart, 12)); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `#business-key-reused"`) {
		t.Fatalf("cart reordered with another content: %d %s", r.status, r.body)
	}

	// ErrOrderNotFound is not final: the 404 is not stored, the retry runs.
	for range 2 {
		if r := s.post("/orders/999999999/cancel", "k4-"+cart, ""); r.status != http.StatusNotFound || r.replayed {
			t.Fatalf("cancel unknown: %d replayed=%v", r.status, r.replayed)
		}
	}
	// ErrAlreadyCancelled is final: the 409 is stored and replayed.
	if _, err := s.svc.CancelOrder(t.Context(), first.order.ID); err != nil { // outside both layers
		t.Fatal(err)
	}
	path := fmt.Sprintf("/orders/%d/cancel", first.order.ID)
	if r := s.post(path, "k5-"+cart, ""); r.status != http.StatusConflict || r.replayed {
		t.Fatalf("cancel cancelled: %d replayed=%v", r.status, r.replayed)
	}
	if r := s.post(path, "k5-"+cart, ""); r.status != http.StatusConflict || !r.replayed {
		t.Fatalf("retry of cancel cancelled: %d replayed=%v, want the stored 409", r.status, r.replayed)
	}
}

// BenchmarkShopBurst is the burst of issue 28: 20 concurrent requests with
// distinct keys on a cold pool of 4 connections, through both layers. It
// reports how many were served (201), refused as store-full (503) or
// failed otherwise; b.N bursts.
func BenchmarkShopBurst(b *testing.B) {
	const burst, conns = 20, 4
	var served, full, other int
	for b.Loop() {
		b.StopTimer()
		s := newShop(b, conns)
		b.StartTimer()
		for _, r := range s.burst(burst) {
			switch r.status {
			case http.StatusCreated:
				served++
			case http.StatusServiceUnavailable:
				full++
			default:
				other++
			}
		}
	}
	b.ReportMetric(float64(served)/float64(b.N), "served/burst")
	b.ReportMetric(float64(full)/float64(b.N), "503/burst")
	b.ReportMetric(float64(other)/float64(b.N), "other/burst")
}

// TestShopClientKey: Tip is keyed by the client's Idempotency-Key
// (//idem:key=clientkey): one tip per key, two keys two tips, and outside
// a keyed request the wrapper fails closed with idem.ErrMissingKey.
func TestShopClientKey(t *testing.T) {
	s := newShop(t, 2)
	cust := "cust-" + randHex(4)
	body := fmt.Sprintf(`{"customer":%q,"amount":3}`, cust)
	tips := func() int {
		var n int
		if err := s.pool.QueryRow(context.Background(), "SELECT count(*) FROM shop_orders WHERE cart_id = 'tip' AND customer = $1", cust).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, key := range []string{"t1-" + cust, "t1-" + cust, "t2-" + cust} {
		if r := s.post("/tips", key, body); r.status != http.StatusCreated {
			t.Fatalf("tip %s: %d %s", key, r.status, r.body)
		}
	}
	if n := tips(); n != 2 {
		t.Fatalf("%d tips for two keys, want 2", n)
	}
	if s.records() != 4 {
		t.Fatalf("%d records, want 4 (edge and wrapper, per key)", s.records())
	}
	ex, svc, err := setup(context.Background(), s.pool, pgstore.WithTable(s.table))
	if err != nil || ex == nil {
		t.Fatal(err)
	}
	if _, err := svc.Tip(t.Context(), orders.TipRequest{Customer: cust, Amount: 3}); !errors.Is(err, idem.ErrMissingKey) {
		t.Fatalf("tip without a client key: %v, want idem.ErrMissingKey", err)
	}
	w := httptest.NewRecorder()
	respond(w, http.StatusCreated, shopdb.Order{}, &idem.MissingKeyError{Op: "Service.Tip", Path: "clientkey"})
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "missing-key-part") {
		t.Fatalf("respond(ErrMissingKey): %d %s", w.Code, w.Body.String())
	}
}
