-- The waste each file's active chain holds, item by item and unpriced:
-- found at refresh per file (txdb/catalog/ingest/waste_found.py), priced
-- by the views waste_items and waste, which found every item of the
-- catalog again for each page, count and facet. Filled for the files
-- already catalogued by the migration's Python step.
CREATE TABLE waste_found (
    file_id INTEGER NOT NULL,
    kind TEXT NOT NULL,          -- large_result, repeated_read, reminder, cache_rebuild
    pos INTEGER,                 -- chain position
    line INTEGER,                -- line of the file (NULL for a rebuild)
    item,                        -- tool_use_id, attachment offset or turn timestamp, as found
    detail,                      -- tool name, file path, attachment type or idle time, as found
    tokens INTEGER,
    resent_turns INTEGER         -- API turns of the chain after the item (1 for a rebuild)
);
CREATE INDEX waste_found_file ON waste_found(file_id, kind);
