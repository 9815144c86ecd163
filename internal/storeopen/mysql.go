package storeopen

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/mysqlstore"
)

// driverForm matches go-sql-driver/mysql's own DSN after "mysql://":
// [user[:password]@]net(address)/dbname[?params], as examples/orders takes
// it.
var driverForm = regexp.MustCompile(`^(?:.*@)?[a-z0-9]+\(`)

// MySQLConfig parses a MySQL or MariaDB DSN in either form idemctl takes:
//
//	mysql://user:password@host:port/dbname?param=value   (a URL; port 3306 by default)
//	mysql://user:password@tcp(host:port)/dbname?param=value   (go-sql-driver/mysql's own DSN after mysql://)
//
// The parameters are go-sql-driver/mysql's (tls=true, timeout=…,
// allowCleartextPasswords=true, a system variable …). A dial timeout of 5
// seconds is set unless the DSN sets one.
func MySQLConfig(dsn string) (*mysql.Config, error) {
	rest, ok := strings.CutPrefix(dsn, "mysql://")
	if !ok {
		return nil, errors.New("want mysql://user:password@host:port/dbname (or mysql:// and a go-sql-driver/mysql DSN)")
	}
	var cfg *mysql.Config
	if driverForm.MatchString(rest) {
		c, err := mysql.ParseDSN(rest)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, errors.New("want mysql://user:password@host:port/dbname (or mysql:// and a go-sql-driver/mysql DSN)")
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "3306")
		}
		if u.Hostname() == "" {
			return nil, errors.New("no host: want mysql://user:password@host:port/dbname")
		}
		c, err := mysql.ParseDSN("tcp(" + host + ")/" + strings.TrimPrefix(u.Path, "/") + "?" + u.RawQuery)
		if err != nil {
			return nil, err
		}
		cfg = c
		if u.User != nil {
			cfg.User = u.User.Username()
			cfg.Passwd, _ = u.User.Password()
		}
	}
	if cfg.DBName == "" {
		return nil, errors.New("no database: want mysql://user:password@host:port/dbname")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	return cfg, nil
}

// OpenMySQL opens a mysqlstore (lease mode: the operators' methods are the
// same in both modes, and read the table a transactional store writes too)
// on a pool of two connections, after checking that the server answers.
func OpenMySQL(ctx context.Context, dsn string, o Options) (idem.AdminStore, func(), error) {
	cfg, err := MySQLConfig(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("not a MySQL DSN: %w", err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("not a MySQL DSN: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("cannot reach the server: %w", err)
	}
	var opts []mysqlstore.Option
	if o.Table != "" {
		opts = append(opts, mysqlstore.WithTable(o.Table))
	}
	s, err := build(func() *mysqlstore.Store { return mysqlstore.New(db, opts...) })
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return s, func() { _ = s.Close(); _ = db.Close() }, nil
}
