-- The analyze breakdown of each session's active chain by content type:
-- text, thinking, tool_use, tool_result, image, command markup,
-- attachments, the envelopes the blocks are sent in and the system prompt.
CREATE VIEW analyze_by_type AS
SELECT b.file_id, b.session_id, b.kind AS category,
       count(*) AS items, sum(b.chars) AS chars, sum(b.signature_chars) AS signature_chars,
       sum(b.tokens) AS tokens
FROM blocks b
JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset
GROUP BY b.file_id, b.kind
UNION ALL
SELECT a.file_id, a.session_id, 'attachment', count(*), NULL, NULL, sum(a.tokens)
FROM attachments a
JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset
WHERE a.policy <> 'system-prompt'
GROUP BY a.file_id
UNION ALL
-- The envelope each content block is sent in (txdb.tokens.envelope_chars)
-- and its message's wrapper: what a message record's tokens hold beyond
-- its blocks' own.
SELECT r.file_id, r.session_id, 'envelope', count(*), NULL, NULL,
       sum(r.tokens - (SELECT coalesce(sum(b.tokens), 0) FROM blocks b
                       WHERE b.file_id = r.file_id AND b.offset = r.offset))
FROM records r
JOIN chain c ON c.file_id = r.file_id AND c.offset = r.offset
WHERE r.type IS NOT 'attachment'
  AND EXISTS (SELECT 1 FROM blocks b WHERE b.file_id = r.file_id AND b.offset = r.offset)
GROUP BY r.file_id
UNION ALL
-- The system prompt (and deferred tool schemas): the latest snapshot of
-- each type in the file, on the chain or not, sent with every request.
SELECT sp.file_id, sp.session_id, 'system_prompt', count(*), NULL, NULL, sum(sp.tokens)
FROM system_prompt sp
GROUP BY sp.file_id;
