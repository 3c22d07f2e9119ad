-- Full-text search: Tool call inputs (the JSON the model sent). Search it in Datasette or in SQL:
--   SELECT * FROM search_tool_input
--   WHERE block_rowid IN (SELECT rowid FROM blocks_fts WHERE blocks_fts MATCH 'word');
CREATE VIEW search_tool_input AS
SELECT * FROM search_blocks WHERE kind = 'tool_use';
