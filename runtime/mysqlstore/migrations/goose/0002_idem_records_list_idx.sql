-- +goose Up
-- The operators' listing of idempotency records (runtime/mysqlstore,
-- idem.AdminStore.List): version 2 of mysqlstore's migrations, applied after
-- 0001_idem_records.up.sql. An index on columns that never change when an
-- outcome is stored (a takeover keeps created_at), so that Complete writes
-- no entry of it; List reads an operation's records newest first through it
-- and never scans the table.
--
-- One statement, plain SQL, on MySQL 8.0 and MariaDB alike (which is why it
-- has no IF NOT EXISTS: MySQL's CREATE INDEX takes none). A migration tool
-- applies it once; (*mysqlstore.Store).Migrate runs it only when the index
-- is absent (information_schema.STATISTICS), so it too is safe to run more
-- than once. InnoDB builds it online (ALGORITHM=INPLACE, LOCK=NONE: writes
-- go on while it is built).
CREATE INDEX idem_records_op_created_idx ON idem_records (op, created_at, idem_key);
-- +goose Down
-- Undoes 0002_idem_records_list_idx.up.sql: drops the listing index.
DROP INDEX idem_records_op_created_idx ON idem_records;
