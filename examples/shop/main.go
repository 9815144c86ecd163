// Command shop is an example service in the shape of an existing chi + pgx
// service with sqlc-style queries, made idempotent at two layers that
// cooperate (docs/LAYERS.md):
//
//   - the edge: idemhttp on the routes, by the client's Idempotency-Key
//     (it catches a key reused with another body);
//   - the business layer: the generated wrapper of orders.Service, by the
//     business key (one order per cart: it catches two clients, or two keys,
//     for one intent).
//
// Both run on one executor on pgstore.NewTx: a request costs one
// connection and one transaction, in which the order, the wrapper's record
// and the edge's record commit together; the wrapper's final= decides what
// a retry sees at both layers; a wrapper's refusal is answered in the
// middleware's problem+json (idemhttp.WriteError).
//
// Run it with a PostgreSQL DSN in IDEM_PG_DSN:
//
//	IDEM_PG_DSN=postgres://... go run .
package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/shop/orders"
	"github.com/idemgen/idemgen/examples/shop/shopdb"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("IDEM_PG_DSN"))
	if err != nil {
		slog.Error("pool", "err", err)
		os.Exit(1)
	}
	defer pool.Close()
	ex, svc, err := setup(ctx, pool)
	if err != nil {
		slog.Error("setup", "err", err)
		os.Exit(1)
	}
	slog.Info("listening", "addr", ":8080")
	if err := http.ListenAndServe(":8080", router(ex, svc)); err != nil {
		slog.Error("serve", "err", err)
	}
}

// setup creates the tables and returns the executor of both layers and
// the wrapped service.
func setup(ctx context.Context, pool *pgxpool.Pool, opts ...pgstore.Option) (*idem.Executor, *orders.IdempotentService, error) {
	store := pgstore.NewTx(pool, opts...)
	if err := store.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	if _, err := pool.Exec(ctx, shopdb.Schema); err != nil {
		return nil, nil, err
	}
	// One executor for both layers: the wrapper's calls join the edge's
	// transaction (idem.NestingTxStore).
	ex := idem.NewExecutor(store, idem.SingleTenant())
	return ex, orders.NewIdempotentService(orders.NewService(pool), ex), nil
}

// router is the chi router: idemhttp on the routes, handlers calling the
// generated wrapper.
// The middlewares in more run inside idemhttp's (the tests put a fault
// there).
func router(ex *idem.Executor, svc *orders.IdempotentService, more ...func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	// chi routes after its middlewares ran, so idemhttp names the
	// operation by the method and the path (chi's route pattern is not
	// known yet).
	r.Use(idemhttp.New(ex, idemhttp.SingleTenant()))
	r.Use(more...)
	r.Post("/orders", func(w http.ResponseWriter, r *http.Request) {
		var req orders.PlaceRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		o, err := svc.PlaceOrder(r.Context(), req)
		respond(w, http.StatusCreated, o, err)
	})
	r.Post("/tips", func(w http.ResponseWriter, r *http.Request) {
		var req orders.TipRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		o, err := svc.Tip(r.Context(), req)
		respond(w, http.StatusCreated, o, err)
	})
	r.Post("/orders/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
		if err != nil {
			http.Error(w, "bad order id", http.StatusBadRequest)
			return
		}
		o, err := svc.CancelOrder(r.Context(), id)
		respond(w, http.StatusOK, o, err)
	})
	return r
}

// respond maps the wrapper's result: idemhttp.WriteError for the
// idempotency layer's refusals, the service's errors by hand. Which of
// these responses a retry sees is decided by the wrapper (final=), not by
// the status: a 404 for ErrOrderNotFound (not final) is not stored, a 409
// for ErrAlreadyCancelled (final) is.
func respond(w http.ResponseWriter, status int, o shopdb.Order, err error) {
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(o)
	case idemhttp.WriteError(w, err):
	case errors.Is(err, orders.ErrOrderNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.Is(err, orders.ErrAlreadyCancelled):
		http.Error(w, err.Error(), http.StatusConflict)
	case errors.Is(err, orders.ErrAmount):
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
	default:
		slog.Error("request failed", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}
