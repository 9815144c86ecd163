-- Schema of the idemgen idempotency records (runtime/pgstore).
--
-- Plain SQL, safe to run more than once; apply it with any migration tool or
-- with (*pgstore.Store).Migrate. The table is named idem_records; a store
-- configured with pgstore.WithTable uses the same definition under its name
-- (Migrate substitutes it).
--
-- status: 1 = PROCESSING, 2 = SUCCEEDED, 3 = FAILED_FINAL (idem.Status).
-- token:  the fencing token of the current claim (idem.Token, as int64 bits).
-- key:    SHA-256 of tenant, operation and key parts (idem.Key.ID);
--         key_text is its readable form, for people only.
-- All instants come from the database clock.
CREATE TABLE IF NOT EXISTS idem_records (
    tenant      text        NOT NULL,
    op          text        NOT NULL,
    key         bytea       NOT NULL CHECK (octet_length(key) = 32),
    key_text    text        NOT NULL DEFAULT '',
    fingerprint bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    status      smallint    NOT NULL CHECK (status BETWEEN 1 AND 3),
    token       bigint      NOT NULL,
    lease_until timestamptz NOT NULL,
    body        bytea,
    err_code    text,
    err_message text,
    meta        bytea,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, op, key)
);

-- The sweeper finds expired records through this index.
CREATE INDEX IF NOT EXISTS idem_records_expires_at_idx ON idem_records (expires_at);
