-- A smaller catalog (issue 28), each cut checked against the query plans
-- of the views, the Datasette pages, show, surgery, estimate and refresh
-- (docs/performance.md, "Storage: indexes and keys"):
-- - records_file_line: nothing searches records by line (a file's records
--   are searched by file_id, which the primary key serves);
-- - blocks_file_tool_use_id: a tool id is looked up with its kind, which
--   blocks_kind_sizes (kind, file_id, tool_use_id) serves; a file's blocks
--   by the primary key;
-- - records_type holds only the rows its readers search: cost-state lines
--   (cli_cost) and compact boundaries (estimate, chain_rows);
-- - usage.gauge_iterations is NULL when it equals iterations (nearly every
--   row), 'null' when the file holds no iterations[] where the API's row
--   has one; every reader reads nullif(coalesce(gauge_iterations,
--   iterations), 'null'): usage_context, the estimate, the export;
-- records and chain stay rowid tables: WITHOUT ROWID saved 0.06 MB on
-- records (its pages filled less under refresh's inserts, which ate most
-- of the 0.18 MB of its key's index), and on chain it turned show's
-- listing of saved thinking into a pass over a file's markers per chain
-- record.

DROP INDEX IF EXISTS blocks_file_tool_use_id;

UPDATE usage SET gauge_iterations = CASE WHEN gauge_iterations IS iterations THEN NULL
                                         WHEN gauge_iterations IS NULL THEN 'null'
                                         ELSE gauge_iterations END;

DROP INDEX IF EXISTS records_file_line;
DROP INDEX IF EXISTS records_type;
CREATE INDEX records_type ON records(type, subtype) WHERE type = 'cost-state' OR subtype = 'compact_boundary';
