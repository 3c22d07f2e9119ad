-- Full-text search: User and assistant message text (text blocks). Search it in Datasette or in SQL:
--   SELECT * FROM search_messages
--   WHERE block_rowid IN (SELECT rowid FROM blocks_fts WHERE blocks_fts MATCH 'word');
CREATE VIEW search_messages AS
SELECT * FROM search_blocks WHERE kind = 'text';
