-- Text stored once. A block's text was a second copy of what raw_chunks
-- holds compressed. The long tool inputs and outputs (of which views and
-- the session page read only the start) now keep their first 2001
-- characters in blocks.text, with cut = 1; the whole text is
-- txdb_text(file_id, offset, idx), decoded from the record's raw JSON
-- (txdb/catalog/ingest/chunks.py; WHOLE_TEXT there reads either). Kept
-- whole: every other block, a Read's input (repeated_reads reads its JSON)
-- and persisted markers (the persisted view parses them).
ALTER TABLE blocks ADD COLUMN cut INTEGER;   -- 1: text holds only the first 2001 characters

-- The full-text index is contentless: it holds the index of every block's
-- whole text and no text (search excerpts decode the hits' texts). Made
-- again here, from the texts still whole, before they are cut. Refresh
-- unindexes a row with the text it indexed (WHOLE_TEXT); to index every
-- block again: INSERT INTO blocks_fts (blocks_fts) VALUES ('delete-all'),
-- then txdb.catalog.ingest.store.FTS_BUILD (it calls txdb_text).
DROP TABLE blocks_fts;
CREATE VIRTUAL TABLE blocks_fts USING fts5(text, content='');
INSERT INTO blocks_fts (rowid, text) SELECT rowid, text FROM blocks WHERE text IS NOT NULL AND text <> '';

UPDATE blocks SET text = substr(text, 1, 2001), cut = 1
WHERE kind IN ('tool_result', 'tool_use', 'command_output') AND length(text) > 2001
  AND NOT (kind = 'tool_use' AND tool_name IS 'Read')
  AND ltrim(text, ' ' || char(9, 10, 13)) NOT LIKE '<persisted-%';  -- ingest/rows.py is_marker

-- Indexes no view's query plan and no lookup of txdb uses (each one's
-- leading columns are another index's, or nothing filters on them).
DROP INDEX IF EXISTS records_session;   -- records by session_id: sessions_session_id finds the file
DROP INDEX IF EXISTS blocks_kind;       -- (kind, tool_name): blocks_kind_sizes leads with kind
DROP INDEX IF EXISTS usage_session;     -- usage by session_id: views group by file
