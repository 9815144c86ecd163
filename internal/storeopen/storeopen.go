// Package storeopen opens the stores of this module from a DSN
// (postgres://, redis://, rediss://, redis-cluster://, mysql://; sqlite: in
// the nested module that has its driver) for the commands that take one:
// idemctl, and the parsing and redaction of MySQL DSNs that cmd/idemgateway
// shares. Each opener checks that the server answers, and every error
// names the DSN with its password redacted (Redact).
package storeopen

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Options shape a store besides its DSN (idemctl's --table, --partitions
// and --prefix).
type Options struct {
	Table      string        // pgstore.WithTable, mysqlstore.WithTable
	Partitions time.Duration // pgstore.WithPartitions
	Prefix     string        // redisstore.WithPrefix
}

// Opener opens the store of dsn; close releases it.
type Opener func(ctx context.Context, dsn string, o Options) (store idem.AdminStore, close func(), err error)

// Openers are the DSN schemes a build serves, by scheme ("postgres",
// "redis", "sqlite", …).
type Openers map[string]Opener

// Open opens the store of dsn with the opener of its scheme in openers
// ("postgresql" is "postgres"; "rediss" and "redis-cluster" are "redis").
// Its errors are sentences for the person who typed the DSN, its password
// redacted: no DSN, "memory" (a service's in-process store, which another
// process cannot reach), no scheme, a scheme this build does not serve
// (sqlite: names the build that does), or the opener's error.
func Open(ctx context.Context, dsn string, so Options, openers Openers) (idem.AdminStore, func(), error) {
	if dsn == "" {
		return nil, nil, errors.New("no store: pass --dsn or set IDEM_DSN (postgres://…, redis://…, mysql://…, sqlite:PATH)")
	}
	if dsn == "memory" || strings.HasPrefix(dsn, "memory:") {
		return nil, nil, errors.New("memory: an in-memory store lives in its service's process, which idemctl cannot reach: mount runtime/idemadmin's handler in the service instead")
	}
	scheme, _, ok := strings.Cut(dsn, ":")
	if !ok {
		return nil, nil, fmt.Errorf("DSN %q: want scheme:… (postgres://, redis://, redis-cluster://, mysql://, sqlite:)", Redact(dsn))
	}
	switch scheme {
	case "postgresql":
		scheme = "postgres"
	case "rediss", "redis-cluster":
		scheme = "redis"
	}
	o, ok := openers[scheme]
	if !ok {
		if scheme == "sqlite" {
			return nil, nil, errors.New("sqlite: this build has no SQLite driver (it lives in a nested module): run go run github.com/idemgen/idemgen/runtime/sqlitestore/cmd/idemctl instead")
		}
		var known []string
		for k := range openers {
			known = append(known, k+":")
		}
		slices.Sort(known)
		return nil, nil, fmt.Errorf("DSN %q: unknown scheme %q (this build serves %s)", Redact(dsn), scheme, strings.Join(known, ", "))
	}
	s, closeStore, err := o(ctx, dsn, so)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", Redact(dsn), err)
	}
	return s, closeStore, nil
}

// Redact hides a DSN's password, in a URL or in go-sql-driver/mysql's
// form after its scheme (user:password@tcp(host:port)/db).
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		scheme, rest, ok := strings.Cut(dsn, "://")
		rest, query, _ := strings.Cut(rest, "?")
		at := strings.LastIndex(rest, "@")
		user, pass, hasPass := strings.Cut(rest[:max(at, 0)], ":")
		if !ok || at < 0 || !hasPass || pass == "" {
			return dsn
		}
		out := scheme + "://" + user + ":xxxxx" + rest[at:]
		if query != "" {
			out += "?" + query
		}
		return out
	}
	if u.User == nil {
		return dsn
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
