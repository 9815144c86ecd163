package idemctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemgen/idemgen/internal/idemctl"
	"github.com/idemgen/idemgen/internal/storeopen"
	"github.com/idemgen/idemgen/internal/testenv"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/pgstore"
	"github.com/idemgen/idemgen/runtime/redisstore"
)

var openers = storeopen.Openers{"postgres": storeopen.OpenPostgres, "redis": storeopen.OpenRedis, "mysql": storeopen.OpenMySQL}

// run runs idemctl with args and returns its exit status, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errw bytes.Buffer
	code := idemctl.Run(context.Background(), args, &out, &errw, openers)
	return code, out.String(), errw.String()
}

func claim(t *testing.T, s idem.Store, tenant, op string, tok idem.Token, body string, parts ...string) idem.Key {
	t.Helper()
	k, err := idem.NewKey(tenant, op, parts...)
	require.NoError(t, err)
	c, err := s.Claim(context.Background(), idem.ClaimRequest{Key: k, Token: tok, Lease: time.Minute, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, c.Claimed)
	if body != "" {
		require.NoError(t, s.Complete(context.Background(), k, tok, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(body)}, time.Hour))
	}
	return k
}

// TestPostgres runs every command against a real PostgreSQL store.
func TestPostgres(t *testing.T) {
	pool, table := testenv.PGStoreTable(t, "idemctl_")
	s := pgstore.New(pool, pgstore.WithTable(table))
	commands(t, s, []string{"--dsn", testenv.PostgresDSN(t), "--table", table}, func(k idem.Key) {
		_, err := pool.Exec(context.Background(), `UPDATE `+s.Table()+` SET lease_until = now() - interval '5 minutes' WHERE key = $1`, k.ID[:])
		require.NoError(t, err)
	})
}

// commands runs every command with the global flags base against s, a
// store of the same records; lapse makes the lease of a key's PROCESSING
// record lapse.
func commands(t *testing.T, s idem.Store, base []string, lapse func(idem.Key)) {
	paid := claim(t, s, "acme", "billing.Charge", 4242, `{"charge":"ch_1"}`, "order-7")
	stuck := claim(t, s, "acme", "billing.Charge", 77, "", "order-8")
	lapse(stuck)

	code, out, errw := run(t, append(base, "get", "--tenant", "acme", "--op", "billing.Charge", "order-7")...)
	require.Equal(t, 0, code, errw)
	t.Logf("idemctl get:\n%s", out)
	assert.Contains(t, out, paid.Hex())
	assert.Contains(t, out, "SUCCEEDED")
	assert.Contains(t, out, `{"charge":"ch_1"}`)
	assert.Contains(t, out, "idemctl forget "+paid.Hex()+" --token 4242 --status SUCCEEDED")

	code, out, _ = run(t, append(base, "--json", "get", paid.Hex())...)
	require.Equal(t, 0, code)
	var v idemadmin.EntryView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	assert.Equal(t, "order-7", v.Text)
	assert.Equal(t, idem.Token(4242), v.Token)

	code, out, errw = run(t, append(base, "list", "--op", "billing.Charge")...)
	require.Equal(t, 0, code, errw)
	t.Logf("idemctl list:\n%s", out)
	assert.Contains(t, out, "2 records")
	assert.Less(t, strings.Index(out, stuck.Hex()), strings.Index(out, paid.Hex()), "newest first")

	code, out, errw = run(t, append(base, "stuck")...)
	require.Equal(t, 0, code, errw)
	t.Logf("idemctl stuck:\n%s", out)
	assert.Contains(t, out, stuck.Hex())
	assert.NotContains(t, out, paid.Hex())
	assert.Contains(t, out, "lapsed at")

	code, out, errw = run(t, append(base, "stats")...)
	require.Equal(t, 0, code, errw)
	t.Logf("idemctl stats:\n%s", out)
	assert.Regexp(t, `billing.Charge\s+PROCESSING \(stuck\)\s+1`, out)
	assert.Regexp(t, `billing.Charge\s+SUCCEEDED\s+1`, out)

	code, _, errw = run(t, append(base, "forget", paid.Hex())...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errw, "--token and --status")
	code, _, errw = run(t, append(base, "forget", paid.Hex(), "--token", "4243", "--status", "SUCCEEDED")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errw, "changed since it was looked at")
	code, out, errw = run(t, append(base, "forget", paid.Hex(), "--token", "4242", "--status", "SUCCEEDED", "--by", "alice", "--reason", "ticket 311")...)
	require.Equal(t, 0, code, errw)
	assert.Contains(t, out, "forgotten: "+paid.Hex())
	assert.Contains(t, errw, `msg="idem: record forgotten" by=alice key=`+paid.Hex()+` tenant=acme op=billing.Charge token=4242`,
		"the audit line names the tenant and operation of a key given by its hex ID")
	code, _, errw = run(t, append(base, "get", paid.Hex())...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errw, "no live record under this key")
	assert.Contains(t, errw, paid.Hex())
}

// TestErrors: a wrong DSN, an unreachable server, a missing table, the
// in-memory store, an unknown command each say what is wrong.
func TestErrors(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no DSN", []string{"--dsn", "", "stats"}, 2, "pass --dsn or set IDEM_DSN"},
		{"unknown scheme", []string{"--dsn", "oracle://x", "stats"}, 2, `unknown scheme "oracle"`},
		{"not a DSN", []string{"--dsn", "localhost", "stats"}, 2, "want scheme:"},
		{"memory", []string{"--dsn", "memory", "stats"}, 2, "runtime/idemadmin"},
		{"sqlite here", []string{"--dsn", "sqlite:/tmp/x.db", "stats"}, 2, "runtime/sqlitestore/cmd/idemctl"},
		{"unreachable", []string{"--dsn", "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2", "stats"}, 2, "cannot reach the server"},
		{"missing table", []string{"--dsn", dsn, "--table", "idem_never_migrated", "stats"}, 1, "Migrate"},
		{"missing table get", []string{"--dsn", dsn, "--table", "idem_never_migrated", "get", strings.Repeat("ab", 32)}, 1, "Migrate"},
		{"bad key", []string{"--dsn", dsn, "get", "nothex"}, 1, "want 64 hex digits"},
		{"unknown command", []string{"--dsn", dsn, "drop"}, 2, `unknown command "drop"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errw := run(t, c.args...)
			assert.Equal(t, c.code, code, errw)
			assert.Contains(t, errw, c.want)
			assert.NotContains(t, errw, "secret", "the password is not printed")
		})
	}
}

// TestRedis runs get, list by status, stats and forget against a real
// Redis server.
func TestRedis(t *testing.T) {
	addr := testenv.RedisAddr(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rc.Close() })
	prefix := "idemctl-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	s := redisstore.New(rc, redisstore.WithPrefix(prefix))
	k := claim(t, s, "acme", "billing.Charge", 99, `"ok"`, "order-7")
	base := []string{"--dsn", "redis://" + addr, "--prefix", prefix}
	code, out, errw := run(t, append(base, "get", "--tenant", "acme", "--op", "billing.Charge", "order-7")...)
	require.Equal(t, 0, code, errw)
	assert.Contains(t, out, "SUCCEEDED")
	code, out, errw = run(t, append(base, "list", "--status", "SUCCEEDED", "--all")...)
	require.Equal(t, 0, code, errw)
	assert.Contains(t, out, k.Hex())
	code, _, errw = run(t, append(base, "list", "--op", "billing.Charge")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errw, "keep no tenant, operation")
	code, out, errw = run(t, append(base, "stats")...)
	require.Equal(t, 0, code, errw)
	assert.Contains(t, out, "SUCCEEDED")
	code, out, errw = run(t, append(base, "forget", k.Hex(), "--token", "99", "--status", "succeeded")...)
	require.Equal(t, 0, code, errw)
	assert.Contains(t, out, "forgotten")
}

// TestOrigin: get shows the span of the call that stored an outcome
// (idemotel keeps it in the record's metadata), decoded, on PostgreSQL;
// and metadata it cannot read in hex, with the reason.
func TestOrigin(t *testing.T) {
	pool, table := testenv.PGStoreTable(t, "idemctl_")
	s := pgstore.New(pool, pgstore.WithTable(table))
	base := []string{"--dsn", testenv.PostgresDSN(t), "--table", table}
	origin := idem.TraceOrigin{
		TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		Flags:   1,
	}
	complete := func(part string, meta []byte) idem.Key {
		k := claim(t, s, "acme", "billing.Charge", 5, "", part)
		require.NoError(t, s.Complete(context.Background(), k, 5, idem.Outcome{Status: idem.StatusSucceeded, Body: []byte(`"ok"`), Meta: meta}, time.Hour))
		return k
	}
	traced := complete("order-1", idem.CallMeta{Origin: origin}.Append(nil))
	later := complete("order-2", []byte{2, 7})

	code, out, errw := run(t, append(base, "get", traced.Hex())...)
	require.Equal(t, 0, code, errw)
	t.Logf("idemctl get:\n%s", out)
	assert.Regexp(t, `(?m)^origin +trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7 \(sampled\)$`, out)
	assert.Regexp(t, `(?m)^traceparent +00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01$`, out)
	assert.NotContains(t, out, "meta (hex)")

	code, out, errw = run(t, append(base, "--json", "get", traced.Hex())...)
	require.Equal(t, 0, code, errw)
	var v idemadmin.EntryView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.NotNil(t, v.Outcome.Origin, out)
	assert.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", v.Outcome.Origin.Trace)
	assert.Equal(t, "00f067aa0ba902b7", v.Outcome.Origin.Span)
	assert.Empty(t, v.Outcome.MetaHex)

	code, out, errw = run(t, append(base, "get", later.Hex())...)
	require.Equal(t, 0, code, errw)
	assert.Regexp(t, `(?m)^meta \(hex\) +0207 \(idem: the record's metadata cannot be read: version 2 \(this release reads version 1\)\)$`, out)
	assert.NotContains(t, out, "origin")
}
