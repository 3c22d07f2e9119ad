-- The analyze breakdown of each session's active chain by content type:
-- text, thinking, tool_use, tool_result, image, command markup,
-- attachments, the envelopes the blocks are sent in and the system prompt.
-- Summed per file at refresh (table type_sums, txdb/catalog/ingest/type_sums.py,
-- which states the rule): summing every chain block of the catalog here
-- made context_by_category's page take 1 s at 10 copies of the corpus.
CREATE VIEW analyze_by_type AS
SELECT t.file_id, t.session_id, t.category, t.items, t.chars, t.signature_chars, t.tokens
FROM type_sums t;
