package benchcmp

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// PGCounter counts PostgreSQL round trips as pgx sends them: one per query
// or exec outside a batch, one per batch, one per explicit prepare that
// reaches the server. (The prepares pgx makes inside a batch for statements
// its cache misses are not seen; runtime/pgstore's TestRoundTrips counts
// network round trips.) It is a pgx QueryTracer, BatchTracer and PrepareTracer.
type PGCounter struct{ n atomic.Int64 }

// Load returns the count so far.
func (t *PGCounter) Load() int64 { return t.n.Load() }

func (t *PGCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.n.Add(1)
	return ctx
}

func (t *PGCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *PGCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.n.Add(1)
	return ctx
}

func (t *PGCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (t *PGCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (t *PGCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

// TracePrepareEnd counts a prepare that went to the server: not one of a
// statement the connection had already prepared under that name (pgx
// answers those from its map).
func (t *PGCounter) TracePrepareEnd(_ context.Context, _ *pgx.Conn, data pgx.TracePrepareEndData) {
	if !data.AlreadyPrepared {
		t.n.Add(1)
	}
}

// RedisCounter counts Redis round trips: one per command, one per pipeline
// (a go-redis hook). A NOSCRIPT fallback of a script shows as two.
type RedisCounter struct{ n atomic.Int64 }

// Load returns the count so far.
func (h *RedisCounter) Load() int64 { return h.n.Load() }

func (h *RedisCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *RedisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}

func (h *RedisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}
