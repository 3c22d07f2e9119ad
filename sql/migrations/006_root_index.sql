-- Roots (records with a uuid and no parent) by file: chain health finds
-- files with more than one without scanning every record.
CREATE INDEX records_roots ON records(file_id, offset) WHERE uuid IS NOT NULL AND parent_uuid IS NULL;
