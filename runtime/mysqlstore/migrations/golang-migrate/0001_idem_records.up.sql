-- Schema of the idemgen idempotency records (runtime/mysqlstore): version 1
-- of mysqlstore's migrations, for MySQL 8.0 and MariaDB 10.6 or later.
--
-- One statement, plain SQL, safe to run more than once. This file is the one
-- source of the schema: golang-migrate applies this directory as it is,
-- goose applies ../goose (the same statement under goose's annotations, see
-- migrations_test.go), and (*mysqlstore.Store).Migrate applies it too
-- (mysqlstore.Schema). The table is named idem_records; a store configured
-- with mysqlstore.WithTable uses the same definition under its name (Migrate
-- substitutes it; with a tool, copy the files and rename the table and its
-- index in them).
--
-- idem_key:    SHA-256 of tenant, operation and key parts (idem.Key.ID): the
--              record's identity.
-- status:      1 = PROCESSING, 2 = SUCCEEDED, 3 = FAILED_FINAL (idem.Status).
-- scheme:      idem.ClaimRequest.Scheme.
-- token:       the fencing token of the claim (idem.Token, as int64 bits).
-- lease_until, expires_at, created_at: microseconds since the Unix epoch by
--              the server's UTC clock (never the client's, never the
--              session's time zone); an expired record behaves as absent.
-- tenant, op, key_text, err_code, err_message, body, meta: the bytes as
--              given, in binary columns (the table's character set is
--              binary): no collation folds case, trims trailing spaces or
--              refuses invalid UTF-8, and no column is ever compared.
CREATE TABLE IF NOT EXISTS idem_records (
    idem_key    BINARY(32)       NOT NULL,
    token       BIGINT           NOT NULL,
    lease_until BIGINT           NOT NULL,
    expires_at  BIGINT           NOT NULL,
    created_at  BIGINT           NOT NULL,
    scheme      INT UNSIGNED     NOT NULL DEFAULT 0,
    status      TINYINT UNSIGNED NOT NULL,
    fingerprint BINARY(32)       NOT NULL,
    tenant      VARBINARY(1024)  NOT NULL,
    op          VARBINARY(1024)  NOT NULL,
    key_text    LONGBLOB         NOT NULL,
    body        LONGBLOB,
    err_code    LONGBLOB,
    err_message LONGBLOB,
    meta        LONGBLOB,
    PRIMARY KEY (idem_key),
    KEY idem_records_expires_at_idx (expires_at),
    CONSTRAINT idem_records_status_chk CHECK (status BETWEEN 1 AND 3)
) ENGINE = InnoDB DEFAULT CHARSET = binary;
