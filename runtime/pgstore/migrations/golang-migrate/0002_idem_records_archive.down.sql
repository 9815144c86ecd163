-- Undoes 0002_idem_records_archive.up.sql: drops the archive table.
DROP TABLE IF EXISTS idem_records_archive;
