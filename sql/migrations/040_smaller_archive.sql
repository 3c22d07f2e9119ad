-- A smaller archive (issue 28). Long tool inputs and outputs keep their
-- first 400 characters in blocks.text, not 2001 (what a table page's cell
-- shows; the session page, a row page and search excerpts read the whole
-- text through txdb_text, decoded from raw_chunks). Cut only where the text
-- decoded from the raw line starts with the text stored, so that the
-- contentless full-text index unindexes a row with the text it indexed.
-- The same rule as ingest/rows.py kept_text; a Read's input (repeated_reads
-- reads its JSON) and persisted markers (the persisted view) stay whole.
UPDATE blocks SET text = substr(text, 1, 400), cut = 1
WHERE kind IN ('tool_result', 'tool_use', 'command_output') AND length(text) > 400
  AND NOT (kind = 'tool_use' AND tool_name IS 'Read')
  AND ltrim(text, ' ' || char(9, 10, 13)) NOT LIKE '<persisted-%'
  AND substr(txdb_text(file_id, offset, idx), 1, length(text)) IS text;

-- The raw lines of the files catalogued in 128 KB chunks are packed again
-- into 1 MB chunks (chunks.CHUNK_BYTES: 0.21x of the raw bytes where they
-- stored 0.24x on real sessions) by the Python step of this migration
-- (txdb.catalog.ingest.chunks.repack), in the same transaction. The freed
-- pages are reused by later refreshes; `VACUUM` gives them back at once.
