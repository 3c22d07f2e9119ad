-- Every searchable block with its session, the base of the search_* views.
-- Search it in Datasette (fts_table blocks_fts, fts_pk block_rowid in the
-- metadata) or in SQL:
--   SELECT * FROM search_blocks
--   WHERE block_rowid IN (SELECT rowid FROM blocks_fts WHERE blocks_fts MATCH 'word');
CREATE VIEW search_blocks AS
SELECT
    b.rowid AS block_rowid,
    b.file_id AS conversation,
    b.file_id,
    s.project,
    s.title,
    r.line,
    b.offset,
    b.idx,
    r.timestamp,
    b.role,
    b.kind,
    b.tool_name,
    b.is_error,
    b.chars,
    b.tokens,
    b.text
FROM blocks b
JOIN records r ON r.file_id = b.file_id AND r.offset = b.offset
LEFT JOIN sessions s ON s.file_id = b.file_id;
