-- Full-text search over blocks.text (message text, thinking, tool inputs,
-- tool output, command output), kept current by triggers.
--
-- blocks_fts is an external content FTS5 table keyed by blocks' rowid
-- (blocks has a composite primary key, so its implicit rowid is the key):
-- the index stores no copy of the text. Datasette detects it for the blocks
-- table (content="blocks"); the search_* views use it via fts_table/fts_pk.
--
-- Why a queue: the refresh inserts blocks one statement per row, and FTS5
-- flushes its pending terms to disk at every statement, so indexing each
-- row from an insert trigger made a cold refresh ~60% slower. Instead the
-- insert trigger only queues the rowid, and the refresh's final
-- `UPDATE files SET ... cursor = ...` of each file (same transaction)
-- indexes the whole queue in one statement (CROSS JOIN keeps the planner
-- from scanning all of blocks to probe the queue).
--
-- Deletes are unindexed at once (a rewritten or pruned file deletes its
-- blocks in one statement). INSERT OR REPLACE deletes a conflicting row
-- without firing delete triggers, so blocks_fts_bi unindexes it first.
-- VACUUM may renumber an implicit rowid: after one, rebuild the index with
--   DELETE FROM _blocks_fts_pending;
--   INSERT INTO blocks_fts(blocks_fts) VALUES ('rebuild');

CREATE VIRTUAL TABLE blocks_fts USING fts5(text, content="blocks", content_rowid="rowid");

-- rowids of blocks inserted but not yet indexed
CREATE TABLE _blocks_fts_pending (block_rowid INTEGER PRIMARY KEY);

INSERT INTO blocks_fts (rowid, text)
SELECT rowid, text FROM blocks WHERE text IS NOT NULL AND text <> '';

CREATE TRIGGER blocks_fts_ai AFTER INSERT ON blocks WHEN new.text IS NOT NULL AND new.text <> '' BEGIN
    INSERT OR IGNORE INTO _blocks_fts_pending (block_rowid) VALUES (new.rowid);
END;

CREATE TRIGGER blocks_fts_bi BEFORE INSERT ON blocks BEGIN
    INSERT INTO blocks_fts (blocks_fts, rowid, text)
    SELECT 'delete', b.rowid, b.text FROM blocks b
    WHERE b.file_id = new.file_id AND b.offset = new.offset AND b.idx = new.idx
      AND b.text IS NOT NULL AND b.text <> ''
      AND NOT EXISTS (SELECT 1 FROM _blocks_fts_pending p WHERE p.block_rowid = b.rowid);
END;

CREATE TRIGGER blocks_fts_ad AFTER DELETE ON blocks WHEN old.text IS NOT NULL AND old.text <> '' BEGIN
    INSERT INTO blocks_fts (blocks_fts, rowid, text)
    SELECT 'delete', old.rowid, old.text
    WHERE NOT EXISTS (SELECT 1 FROM _blocks_fts_pending p WHERE p.block_rowid = old.rowid);
    DELETE FROM _blocks_fts_pending WHERE block_rowid = old.rowid;
END;

CREATE TRIGGER blocks_fts_au AFTER UPDATE OF text ON blocks BEGIN
    INSERT INTO blocks_fts (blocks_fts, rowid, text)
    SELECT 'delete', old.rowid, old.text
    WHERE old.text IS NOT NULL AND old.text <> ''
      AND NOT EXISTS (SELECT 1 FROM _blocks_fts_pending p WHERE p.block_rowid = old.rowid);
    INSERT OR IGNORE INTO _blocks_fts_pending (block_rowid)
    SELECT new.rowid WHERE new.text IS NOT NULL AND new.text <> '';
END;

-- The refresh ends each file's transaction by moving its cursor: index
-- everything queued, in one statement.
CREATE TRIGGER blocks_fts_flush AFTER UPDATE OF cursor ON files BEGIN
    INSERT INTO blocks_fts (rowid, text)
    SELECT b.rowid, b.text FROM _blocks_fts_pending p CROSS JOIN blocks b ON b.rowid = p.block_rowid
    WHERE b.text IS NOT NULL AND b.text <> '';
    DELETE FROM _blocks_fts_pending;
END;
