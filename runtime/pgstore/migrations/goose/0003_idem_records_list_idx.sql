-- +goose Up
-- The operators' listing of idempotency records (runtime/pgstore,
-- idem.AdminStore.List): version 3 of pgstore's migrations, applied after
-- 0001_idem_records.up.sql. An index on columns that never change after a
-- claim (a takeover keeps created_at), so that storing an outcome stays a
-- HOT update; List reads an operation's records newest first through it
-- and never scans the table. Plain SQL, safe to run more than once. On a
-- large table, create it beforehand without blocking writes:
--   CREATE INDEX CONCURRENTLY idem_records_op_created_idx
--       ON idem_records (op, created_at, key);
-- and this file (or Migrate) then leaves it as it is.
CREATE INDEX IF NOT EXISTS idem_records_op_created_idx ON idem_records (op, created_at, key);
-- +goose Down
-- Drops the index of the operators' listing (version 3).
DROP INDEX IF EXISTS idem_records_op_created_idx;
