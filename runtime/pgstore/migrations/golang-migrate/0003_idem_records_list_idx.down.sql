-- Drops the index of the operators' listing (version 3).
DROP INDEX IF EXISTS idem_records_op_created_idx;
