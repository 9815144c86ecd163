-- Schema of the idemgen idempotency records in partitioned mode
-- (runtime/pgstore, pgstore.WithPartitions): the records table partitioned by
-- range of part_at, the instant by which a record has certainly expired.
-- (*pgstore.Store).Migrate runs it (pgstore.PartitionedSchema) and creates
-- the first partitions; Sweep creates partitions ahead and drops the ones
-- whose records have all expired. Plain SQL, safe to run more than once.
-- A store configured with pgstore.WithTable uses the same definition under
-- its name (Migrate substitutes it; MigrationSQL prints it).
--
-- Columns are those of the plain layout (migrations/golang-migrate/0001),
-- without sweep_at and its index (nothing is swept row by row), plus:
-- part_at:     the partition key: the claim's expiry plus one partition
--              interval, so that the outcome (whose TTL restarts when it is
--              stored) normally fits without moving the row; never earlier
--              than expires_at (the CHECK), so a partition whose upper bound
--              has passed holds only expired records and is dropped whole.
--
-- The key is not unique in the table: PostgreSQL can enforce uniqueness
-- across partitions only on a key that contains part_at. pgstore makes a key
-- live at most once by taking a transaction-scoped advisory lock on it for
-- every write that creates or extends a live record (see partition.go and
-- docs/decisions/pgstore-partitions.md). Write to this table only through
-- pgstore.
CREATE TABLE IF NOT EXISTS idem_records (
    key         bytea       NOT NULL CHECK (octet_length(key) = 32),
    token       bigint      NOT NULL,
    lease_until timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    part_at     timestamptz NOT NULL,
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
    meta        bytea,
    CHECK (expires_at <= part_at)
) PARTITION BY RANGE (part_at);

-- The claim finds a key's records through this index, in each partition that
-- may hold a live record (part_at later than now).
CREATE INDEX IF NOT EXISTS idem_records_key_idx ON idem_records (key);
