-- Undoes 0002_idem_records_list_idx.up.sql: drops the listing index.
DROP INDEX idem_records_op_created_idx ON idem_records;
