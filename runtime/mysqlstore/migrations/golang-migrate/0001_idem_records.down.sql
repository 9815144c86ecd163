-- Undoes 0001_idem_records.up.sql: drops the records table and its index.
DROP TABLE IF EXISTS idem_records;
