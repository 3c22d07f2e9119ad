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
-- - chain is WITHOUT ROWID: nothing reads its rowid, and its primary key
--   (file_id, pos) stops being a second copy of the key beside the table
--   (records stays a rowid table: WITHOUT ROWID saved 0.06 MB there, not
--   the 0.18 MB of its key's index, its pages filled less by refresh).

DROP INDEX IF EXISTS blocks_file_tool_use_id;

UPDATE usage SET gauge_iterations = CASE WHEN gauge_iterations IS iterations THEN NULL
                                         WHEN gauge_iterations IS NULL THEN 'null'
                                         ELSE gauge_iterations END;

DROP INDEX IF EXISTS records_file_line;
DROP INDEX IF EXISTS records_type;
CREATE INDEX records_type ON records(type, subtype) WHERE type = 'cost-state' OR subtype = 'compact_boundary';

-- chain is made again under its name (its index with it); nothing names
-- it in a trigger, and views are dropped while migrations run.
CREATE TABLE _chain_044 (
    file_id INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    timestamp TEXT,
    PRIMARY KEY (file_id, pos),
    FOREIGN KEY (file_id, offset) REFERENCES records(file_id, offset)
) WITHOUT ROWID;
INSERT INTO _chain_044 (file_id, pos, offset, timestamp)
SELECT file_id, pos, offset, timestamp FROM chain ORDER BY file_id, pos;
DROP TABLE chain;
ALTER TABLE _chain_044 RENAME TO chain;
CREATE INDEX chain_record ON chain(file_id, offset);

