-- Full-text search: Thinking blocks (the model's reasoning, when recorded in clear). Search it in Datasette or in SQL:
--   SELECT * FROM search_thinking
--   WHERE block_rowid IN (SELECT rowid FROM blocks_fts WHERE blocks_fts MATCH 'word');
CREATE VIEW search_thinking AS
SELECT * FROM search_blocks WHERE kind = 'thinking';
