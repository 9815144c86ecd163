-- Schema of the idemgen idempotency records (runtime/sqlitestore).
--
-- Plain SQL, safe to run more than once; apply it with any migration tool or
-- with (*sqlitestore.Store).Migrate.
--
-- key:         SHA-256 of tenant, operation and key parts (idem.Key.ID): the
--              record's identity, and the only indexed bytes.
-- status:      1 = PROCESSING, 2 = SUCCEEDED, 3 = FAILED_FINAL (idem.Status).
-- scheme:      idem.ClaimRequest.Scheme (a uint32).
-- token:       the fencing token of the claim (idem.Token, as int64 bits).
-- lease_until, expires_at, created_at: Unix nanoseconds by the clock of the
--              process that wrote them (see the package documentation).
-- tenant, op, key_text, err_code, err_message: the bytes as given (any byte
--              string; for people and audit only, never compared).
CREATE TABLE IF NOT EXISTS idem_records (
    key         BLOB    NOT NULL PRIMARY KEY CHECK (length(key) = 32),
    token       INTEGER NOT NULL,
    lease_until INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    scheme      INTEGER NOT NULL DEFAULT 0,
    status      INTEGER NOT NULL CHECK (status BETWEEN 1 AND 3),
    fingerprint BLOB    NOT NULL CHECK (length(fingerprint) = 32),
    tenant      BLOB    NOT NULL,
    op          BLOB    NOT NULL,
    key_text    BLOB    NOT NULL,
    body        BLOB,
    err_code    BLOB,
    err_message BLOB,
    meta        BLOB
);

-- The sweeper finds expired records through this index.
CREATE INDEX IF NOT EXISTS idem_records_expires_at_idx ON idem_records (expires_at);
