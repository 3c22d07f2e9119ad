-- Full-text search: Tool results and local command output. Search it in Datasette or in SQL:
--   SELECT * FROM search_tool_output
--   WHERE block_rowid IN (SELECT rowid FROM blocks_fts WHERE blocks_fts MATCH 'word');
CREATE VIEW search_tool_output AS
SELECT * FROM search_blocks WHERE kind IN ('tool_result', 'command_output');
