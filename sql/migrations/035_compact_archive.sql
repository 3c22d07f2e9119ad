-- The compact archive. A record's raw line is kept only to be given back
-- (restore, the secrets scan, txdb_json() in ad-hoc SQL): it leaves
-- `records` for `raw_chunks`, where consecutive records of a file are
-- stored zstd-compressed together (txdb/ingest/chunks.py), and `records`
-- keeps as columns what views read of a line's JSON:
--   compact_summary  1 when isCompactSummary is true (human_prompts)
--   forked           1 when the line holds a forkedFrom object (billed_usage)
--   json             the JSON of a `cost-state` line (cli_cost), else NULL
-- The old table's raw lines are packed into chunks by the Python step of
-- this migration (txdb.db.migrate runs chunks.upgrade after this SQL, in
-- the same transaction), which then drops `_records_legacy`.

-- Renamed without rewriting the references of other tables (blocks,
-- attachments, usage and chain keep naming `records`, the new table).
PRAGMA legacy_alter_table = ON;
DROP INDEX IF EXISTS records_file_line;
DROP INDEX IF EXISTS records_file_uuid;
DROP INDEX IF EXISTS records_type;
DROP INDEX IF EXISTS records_session;
DROP INDEX IF EXISTS records_roots;
DROP INDEX IF EXISTS records_sizes;
ALTER TABLE records RENAME TO _records_legacy;
PRAGMA legacy_alter_table = OFF;

CREATE TABLE records (
    file_id INTEGER NOT NULL REFERENCES files(id),
    offset INTEGER NOT NULL,          -- byte offset of the object in the file
    length INTEGER NOT NULL,          -- its length in bytes
    line INTEGER NOT NULL,            -- 1-based line number
    session_id TEXT,
    type TEXT,
    subtype TEXT,                     -- system subtype or attachment type
    uuid TEXT,
    parent_uuid TEXT,
    logical_parent_uuid TEXT,
    leaf_uuid TEXT,                   -- summary / last-prompt pointer
    timestamp TEXT,
    is_sidechain INTEGER,
    is_meta INTEGER,
    role TEXT,
    model TEXT,
    message_id TEXT,
    request_id TEXT,
    tokens INTEGER NOT NULL DEFAULT 0, -- estimated context tokens of this line
    compact_summary INTEGER,          -- 1: isCompactSummary is true
    forked INTEGER,                   -- 1: the line holds a forkedFrom object
    json TEXT,                        -- a cost-state line's JSON; any line's: txdb_json(file_id, offset)
    PRIMARY KEY (file_id, offset)
);

INSERT INTO records (file_id, offset, length, line, session_id, type, subtype, uuid, parent_uuid,
                     logical_parent_uuid, leaf_uuid, timestamp, is_sidechain, is_meta, role, model,
                     message_id, request_id, tokens, compact_summary, forked, json)
SELECT file_id, offset, length, line, session_id, type, subtype, uuid, parent_uuid,
       logical_parent_uuid, leaf_uuid, timestamp, is_sidechain, is_meta, role, model,
       message_id, request_id, tokens,
       CASE WHEN json_valid(raw) THEN (CASE WHEN json_extract(raw, '$.isCompactSummary') IS 1 THEN 1 END) END,
       CASE WHEN instr(raw, '"forkedFrom":{') THEN 1 END,
       CASE WHEN type = 'cost-state' AND json_valid(raw) THEN raw END
FROM _records_legacy ORDER BY file_id, offset;

CREATE INDEX records_file_line ON records(file_id, line);
CREATE INDEX records_file_uuid ON records(file_id, uuid);
CREATE INDEX records_type ON records(type, subtype);
CREATE INDEX records_session ON records(session_id);
CREATE INDEX records_roots ON records(file_id, offset) WHERE uuid IS NOT NULL AND parent_uuid IS NULL;
CREATE INDEX records_sizes ON records(file_id, offset, type, tokens, session_id);

-- Each chunk: a zstd frame of a header (per record, its offset after first_offset
-- and its length, little-endian uint32 pairs) then the records' raw bytes,
-- in offset order. A chunk is never changed in place: a growing file's
-- last chunk is replaced under a new id (AUTOINCREMENT never reuses one),
-- so a decoded chunk can be cached by its id.
CREATE TABLE raw_chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    file_id INTEGER NOT NULL REFERENCES files(id),
    first_offset INTEGER NOT NULL,    -- offset of its first record
    last_offset INTEGER NOT NULL,     -- offset of its last record
    lines INTEGER NOT NULL,           -- records it holds
    bytes INTEGER NOT NULL,           -- their raw bytes, uncompressed
    data BLOB NOT NULL
);
CREATE UNIQUE INDEX raw_chunks_file ON raw_chunks(file_id, first_offset);
