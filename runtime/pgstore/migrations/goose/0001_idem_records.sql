-- +goose Up
-- Schema of the idemgen idempotency records (runtime/pgstore), layout 2:
-- version 1 of pgstore's migrations.
--
-- Plain SQL, safe to run more than once. This file is the one source of the
-- statements: golang-migrate applies this directory as it is, goose applies
-- ../goose (derived from it byte for byte, see migrations_test.go), and
-- (*pgstore.Store).Migrate applies it too (pgstore.Schema), after upgrading a
-- table of layout 1 (v0.1: text columns, primary key (tenant, op, key)) in
-- place; a migration tool does not upgrade layout 1 (this file then fails,
-- naming the table), so run Migrate once on a v0.1 database. The table is
-- named idem_records; a store configured with pgstore.WithTable uses the same
-- definition under its name (Migrate substitutes it; with a tool, copy the
-- files and rename the table, its index and the archive in them).
--
-- key:         SHA-256 of tenant, operation and key parts (idem.Key.ID): the
--              record's identity, and the only indexed bytes.
-- status:      1 = PROCESSING, 2 = SUCCEEDED, 3 = FAILED_FINAL (idem.Status).
-- scheme:      idem.ClaimRequest.Scheme (a uint32, stored as its int32 bits).
-- token:       the fencing token of the claim (idem.Token, as int64 bits).
-- expires_at:  when the record expires; an expired record behaves as absent.
-- sweep_at:    when the sweeper first looks at the record: never later than
--              expires_at. Complete leaves it alone (so that storing an
--              outcome changes no indexed column and can be a HOT update);
--              the sweeper moves it to expires_at when it finds the record
--              still live.
-- tenant, op, key_text, err_code, err_message: the bytes as given (any byte
--              string; for people and audit only, never compared).
-- All instants come from the database clock.
-- A table of layout 1 would make CREATE TABLE IF NOT EXISTS a no-op and leave
-- a table this version of pgstore cannot use: refuse it instead. (The block
-- ends on the line of its last semicolon, so that goose, which splits a file
-- at lines ending in one, sends it whole.)
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('idem_records')
            AND attname = 'tenant' AND atttypid = 'text'::regtype AND NOT attisdropped) THEN
        RAISE EXCEPTION 'table idem_records has the layout of idemgen v0.1 (text columns): upgrade it once with (*pgstore.Store).Migrate'; END IF; END $$;

CREATE TABLE IF NOT EXISTS idem_records (
    key         bytea       NOT NULL PRIMARY KEY CHECK (octet_length(key) = 32),
    token       bigint      NOT NULL,
    lease_until timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    sweep_at    timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    scheme      integer     NOT NULL DEFAULT 0,
    status      smallint    NOT NULL CHECK (status BETWEEN 1 AND 3),
    fingerprint bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    tenant      bytea       NOT NULL,
    op          bytea       NOT NULL,
    key_text    bytea       NOT NULL DEFAULT ''::bytea,
    body        bytea,
    err_code    bytea,
    err_message bytea,
    meta        bytea
) WITH (fillfactor = 80);

-- The sweeper finds records due for a look through this index.
CREATE INDEX IF NOT EXISTS idem_records_sweep_at_idx ON idem_records (sweep_at);
-- +goose Down
-- Undoes 0001_idem_records.up.sql: drops the records table and its index.
DROP TABLE IF EXISTS idem_records;
