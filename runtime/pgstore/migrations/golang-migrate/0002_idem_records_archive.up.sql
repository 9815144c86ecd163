-- Optional archive of swept idempotency records (runtime/pgstore,
-- pgstore.WithArchive): the sweeper moves expired rows of idem_records here
-- instead of deleting them, for audit: version 2 of pgstore's migrations,
-- applied after 0001_idem_records.up.sql. The archive has
-- no primary key: one key can be archived more than once over time.
CREATE TABLE IF NOT EXISTS idem_records_archive (
    LIKE idem_records,
    archived_at timestamptz NOT NULL DEFAULT now()
);
