package benchcmp

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/internal/benchcmp/orders"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/pgstore"
)

// PGServerPhase is one comparison of server time: the wrapper's store
// statements against the floor's, per call, as pg_stat_statements counts
// them (planning and execution; not the commit's WAL flush, which both
// wait for alike), and the updates of each side's table, as
// pg_stat_user_tables counts them.
type PGServerPhase struct {
	Name           string
	Wrapper, Floor string // what each side runs
	Calls          int    // per side
	WrapperUS      float64
	FloorUS        float64
	// WAL bytes each side's store statements wrote per call
	// (pg_stat_statements.wal_bytes): what a durable commit flushes.
	WrapperWAL, FloorWAL float64
	// Updates and HOT updates of each side's table over the phase.
	WrapperUpd, WrapperHot, FloorUpd, FloorHot int64
	Statements                                 []PGStatement
	Note                                       string
}

// PGStatement is one statement's figures over a phase.
type PGStatement struct {
	Side       string // "wrapper", "floor" or "both" (not counted)
	Query      string // its first line
	Calls      int64
	ExecUS     float64 // mean execution time
	PlanUS     float64 // mean planning time
	ServerUSOp float64 // total time ÷ the phase's calls per side
	WALBytesOp float64 // WAL bytes written ÷ the phase's calls per side
}

// PGServerReport is the server-time section of a run.
type PGServerReport struct {
	Phases []PGServerPhase
	// Skipped says why nothing was measured (no pg_stat_statements).
	Skipped string
}

// PGServerTime measures, on a pool of its own with one caller, calls
// first calls and calls replays of the generated wrapper in each
// PostgreSQL mode against its floor, alternating call by call: the server
// time of the store statements each side sends (pg_stat_statements) and the
// HOT updates of each side's table (pg_stat_user_tables, read once the
// pool's sessions have ended and flushed their counters). It empties the
// tables first.
func (e *Env) PGServerTime(ctx context.Context, calls int) (*PGServerReport, error) {
	if e.Pool == nil {
		return &PGServerReport{Skipped: "no PostgreSQL server"}, nil
	}
	if _, err := e.Pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return &PGServerReport{Skipped: fmt.Sprintf("pg_stat_statements is not available (%v)", err)}, nil
	}
	if _, err := e.Pool.Exec(ctx, "SELECT 1 FROM pg_stat_statements LIMIT 1"); err != nil {
		return &PGServerReport{Skipped: fmt.Sprintf("pg_stat_statements is not loaded: start the server with shared_preload_libraries=pg_stat_statements, as scripts/pg.sh does when it is installed (%v)", err)}, nil
	}
	if err := e.reset(); err != nil {
		return nil, err
	}
	rep := &PGServerReport{}
	type phase struct {
		name, wrapper, floor, wtable, ftable string
		store                                func(*pgxpool.Pool) idem.Store
		replay, cold                         bool
		floorFirst                           func(*Env, context.Context, *orders.Service, *orders.Order) error
		note                                 string
	}
	lease := func(p *pgxpool.Pool) idem.Store { return pgstore.New(p, pgstore.WithTable(tableLease)) }
	tx := func(p *pgxpool.Pool) idem.Store { return pgstore.NewTx(p, pgstore.WithTable(tableTx)) }
	phases := []phase{
		{name: "postgres lease/first", wrapper: "claim, complete", floor: "hand-written reserve (INSERT … ON CONFLICT DO NOTHING) and fenced complete (leaseFloorClaimSQL, leaseFloorCompleteSQL)",
			wtable: tableLease, ftable: tableFloor, store: lease, floorFirst: (*Env).pgLeaseFloor},
		{name: "postgres lease/replay", wrapper: "SELECT of the final record (a key the store saw final)", floor: "SELECT", wtable: tableLease, ftable: tableFloor,
			store: lease, replay: true, floorFirst: (*Env).pgLeaseFloor},
		{name: "postgres lease/replay cold", wrapper: "claim (returns the record; a key the store never saw)", floor: "SELECT", wtable: tableLease, ftable: tableFloor,
			store: lease, replay: true, cold: true, floorFirst: (*Env).pgLeaseFloor},
		{name: "postgres tx/first", wrapper: "decide, claim, complete", floor: "claim, complete (floorClaimSQL, floorCompleteSQL)",
			wtable: tableTx, ftable: tableFloor, store: tx, floorFirst: (*Env).pgPipelinedFloor,
			note: "BEGIN, SAVEPOINT and COMMIT are not counted on either side (the wrapper's batch has one statement more: SAVEPOINT)"},
		{name: "postgres tx/replay", wrapper: "SELECT of the final record (a key the store saw final)", floor: "SELECT", wtable: tableTx, ftable: tableFloor,
			store: tx, replay: true, floorFirst: (*Env).pgPipelinedFloor},
		{name: "postgres tx/replay cold", wrapper: "its batch (decide, the claim that reads nothing without the key's lock, BEGIN, SAVEPOINT) and the COMMIT the next call's batch sends first (a key the store never saw)", floor: "SELECT", wtable: tableTx, ftable: tableFloor,
			store: tx, replay: true, cold: true, floorFirst: (*Env).pgPipelinedFloor,
			note: "every statement of the wrapper side is counted, BEGIN, SAVEPOINT and COMMIT included"},
	}
	for _, ph := range phases {
		r, err := e.serverPhase(ctx, calls, ph.name, ph.wtable, ph.ftable, ph.store, ph.replay, ph.cold, ph.floorFirst)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ph.name, err)
		}
		r.Wrapper, r.Floor, r.Note = ph.wrapper, ph.floor, ph.note
		rep.Phases = append(rep.Phases, *r)
		if err := e.reset(); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

type tableStat struct{ upd, hot int64 }

func (e *Env) tableStats(ctx context.Context, tables ...string) (map[string]tableStat, error) {
	rows, err := e.Pool.Query(ctx, `SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = ANY($1)`, tables)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]tableStat{}
	for rows.Next() {
		var name string
		var s tableStat
		if err := rows.Scan(&name, &s.upd, &s.hot); err != nil {
			return nil, err
		}
		m[name] = s
	}
	return m, rows.Err()
}

func (e *Env) serverPhase(ctx context.Context, calls int, name, wtable, ftable string, newStore func(*pgxpool.Pool) idem.Store,
	replay, cold bool, floorFirst func(*Env, context.Context, *orders.Service, *orders.Order) error) (*PGServerPhase, error) {
	cfg := e.Pool.Config().Copy()
	cfg.ConnConfig.Tracer = nil
	cfg.MaxConns, cfg.MinConns = 2, 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	sub := &Env{Ctx: ctx, Pool: pool, PG: &PGCounter{}, run: e.run}
	svc := &orders.Service{Pool: pool}
	wsvc := orders.NewIdempotentService(svc, idem.NewExecutor(newStore(pool), idem.SingleTenant()))
	tag := strings.NewReplacer(" ", "-", "/", "-").Replace(name)
	wos, fos := e.fixed(tag+"-w", calls), e.fixed(tag+"-f", calls)
	const warm = 16
	if replay {
		// Decide 256 keys on each side; the phase replays them in turn.
		// Cold: the wrapper's keys are decided by another store (as by
		// another process), one per call and warm-up call, each replayed
		// once: the measured store never saw them final.
		decider := wsvc
		fos = fos[:min(256, calls)]
		if cold {
			decider = orders.NewIdempotentService(svc, idem.NewExecutor(newStore(pool), idem.SingleTenant()))
			wos = e.fixed(tag+"-w", calls+warm)
		} else {
			wos = wos[:min(256, calls)]
		}
		for i := range wos {
			if _, err := decider.Place(ctx, wos[i], op); err != nil {
				return nil, err
			}
		}
		for i := range fos {
			if err := floorFirst(sub, ctx, svc, fos[i]); err != nil {
				return nil, err
			}
		}
	}
	// Sessions flush their table counters when they end (an idle one may
	// keep them for 10s): end the measuring pool's sessions and wait until
	// the counters settle. Then warm both sides' statement caches on new
	// sessions (their updates count: warm calls more per side), and start
	// counting statements.
	pool.Reset()
	before, err := e.settledStatsFrom(ctx, 0, nil, wtable, ftable)
	if err != nil {
		return nil, err
	}
	warmW, warmF := wos, fos
	switch {
	case !replay:
		warmW, warmF = e.fixed(tag+"-warm-w", warm), e.fixed(tag+"-warm-f", warm)
	case cold:
		warmW, wos = wos[calls:], wos[:calls]
	}
	for i := range warm {
		if _, err := wsvc.Place(ctx, warmW[i%len(warmW)], op); err != nil {
			return nil, err
		}
		if err := floorSide(sub, ctx, svc, warmF[i%len(warmF)], replay, floorFirst); err != nil {
			return nil, err
		}
	}
	if _, err := e.Pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		return nil, err
	}
	for i := range calls {
		w, f := wos[i%len(wos)], fos[i%len(fos)]
		if _, err := wsvc.Place(ctx, w, op); err != nil {
			return nil, err
		}
		if err := floorSide(sub, ctx, svc, f, replay, floorFirst); err != nil {
			return nil, err
		}
	}
	stmts, err := e.statements(ctx, calls, wtable, ftable, replay)
	if err != nil {
		return nil, err
	}
	pool.Close()
	want := int64(0) // a replay updates nothing
	if !replay {
		want = int64(calls + warm)
	}
	after, err := e.settledStatsFrom(ctx, want, before, wtable, ftable)
	if err != nil {
		return nil, err
	}
	r := &PGServerPhase{Name: name, Calls: calls, Statements: stmts}
	for _, s := range stmts {
		switch s.Side {
		case "wrapper":
			r.WrapperUS += s.ServerUSOp
			r.WrapperWAL += s.WALBytesOp
		case "floor":
			r.FloorUS += s.ServerUSOp
			r.FloorWAL += s.WALBytesOp
		}
	}
	r.WrapperUpd, r.WrapperHot = after[wtable].upd-before[wtable].upd, after[wtable].hot-before[wtable].hot
	r.FloorUpd, r.FloorHot = after[ftable].upd-before[ftable].upd, after[ftable].hot-before[ftable].hot
	return r, nil
}

// settledStatsFrom reads the tables' counters until they have not changed for
// 1.5s and, with base, each table shows at least want updates more than in
// base (at most 20s): sessions flush their counters when they end, or when
// idle for about a second.
func (e *Env) settledStatsFrom(ctx context.Context, want int64, base map[string]tableStat, tables ...string) (map[string]tableStat, error) {
	deadline := time.Now().Add(20 * time.Second)
	var last map[string]tableStat
	since := time.Now()
	for {
		cur, err := e.tableStats(ctx, tables...)
		if err != nil {
			return nil, err
		}
		if !maps.Equal(cur, last) {
			last, since = cur, time.Now()
		}
		done := time.Since(since) >= 1500*time.Millisecond
		for _, t := range tables {
			if base != nil && cur[t].upd-base[t].upd < want {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func floorSide(e *Env, ctx context.Context, svc *orders.Service, o *orders.Order, replay bool,
	first func(*Env, context.Context, *orders.Service, *orders.Order) error) error {
	if replay {
		return e.pgReplayFloor(ctx, o)
	}
	return first(e, ctx, svc, o)
}

// statements reads pg_stat_statements and sorts each statement to a side:
// the floor's when it names ftable; the wrapper's when it names wtable or
// is one only the wrapper sends (its lock_timeout and idemgen settings)
// and, in a replay phase, every other (the floor's replay is one SELECT);
// in a first-call phase the others (BEGIN, COMMIT, the business INSERT)
// are the same on both sides and listed as "both", not counted.
func (e *Env) statements(ctx context.Context, calls int, wtable, ftable string, replay bool) ([]PGStatement, error) {
	rows, err := e.Pool.Query(ctx, `SELECT query, calls, total_exec_time, total_plan_time, wal_bytes::float8 FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls >= $1`, int64(calls)/2)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PGStatement
	for rows.Next() {
		var (
			q               string
			n               int64
			exec, plan, wal float64
		)
		if err := rows.Scan(&q, &n, &exec, &plan, &wal); err != nil {
			return nil, err
		}
		s := PGStatement{Side: "both", Calls: n, ExecUS: exec * 1e3 / float64(n), PlanUS: plan * 1e3 / float64(n),
			ServerUSOp: (exec + plan) * 1e3 / float64(calls), WALBytesOp: wal / float64(calls)}
		switch {
		case strings.Contains(q, "pg_stat"):
			continue
		case strings.Contains(q, ftable):
			s.Side = "floor"
		case replay, strings.Contains(q, wtable), strings.Contains(q, "idemgen."), strings.Contains(q, "lock_timeout"):
			s.Side = "wrapper"
		}
		s.Query = firstLine(q)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b PGStatement) int { return strings.Compare(a.Side+a.Query, b.Side+b.Query) })
	return out, nil
}

func firstLine(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		q = q[:i] + " …"
	}
	if len(q) > 90 {
		q = q[:90] + " …"
	}
	return q
}

// PGServerTable writes the server-time section.
func PGServerTable(w io.Writer, r *PGServerReport) {
	if r.Skipped != "" {
		fmt.Fprintf(w, "Not measured: %s.\n", r.Skipped)
		return
	}
	fmt.Fprintf(w, "| comparison | calls per side | wrapper statements | server time per call, wrapper | floor statements | floor | wrapper ÷ floor | WAL bytes per call, wrapper / floor | updates HOT, wrapper's table | floor's table | aims |\n")
	fmt.Fprintf(w, "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|\n")
	for _, p := range r.Phases {
		ratio := p.WrapperUS / p.FloorUS
		aim := "–"
		if strings.HasSuffix(p.Name, "lease/first") {
			mark := "✓"
			if ratio > 1.0 {
				mark = "✗"
			}
			hot := "✓"
			if p.WrapperUpd == 0 || p.WrapperHot*10 < p.WrapperUpd*9 {
				hot = "✗"
			}
			aim = fmt.Sprintf("%s ≤ 1.0× the hand-written reserve/complete; %s HOT completes (aim ≥ 90%%)", mark, hot)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.1f µs | %s | %.1f µs | %.2f× | %.0f / %.0f | %s | %s | %s |\n", p.Name, p.Calls, p.Wrapper, p.WrapperUS,
			p.Floor, p.FloorUS, ratio, p.WrapperWAL, p.FloorWAL, hotCell(p.WrapperHot, p.WrapperUpd), hotCell(p.FloorHot, p.FloorUpd), aim)
	}
	fmt.Fprintf(w, "\nPer statement (mean µs per execution; per call: total ÷ calls per side):\n\n")
	fmt.Fprintf(w, "| comparison | side | statement | executions | exec µs | plan µs | µs per call | WAL bytes per call |\n|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Phases {
		for _, s := range p.Statements {
			fmt.Fprintf(w, "| %s | %s | `%s` | %d | %.1f | %.1f | %.1f | %.0f |\n", p.Name, s.Side, strings.ReplaceAll(s.Query, "|", `\|`),
				s.Calls, s.ExecUS, s.PlanUS, s.ServerUSOp, s.WALBytesOp)
		}
	}
	var notes []string
	for _, p := range r.Phases {
		if p.Note != "" {
			notes = append(notes, p.Name+": "+p.Note)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nNotes: %s.\n", strings.Join(notes, "; "))
	}
}

func hotCell(hot, upd int64) string {
	if upd == 0 {
		return "no updates"
	}
	return fmt.Sprintf("%d of %d (%.0f%%)", hot, upd, 100*float64(hot)/float64(upd))
}
