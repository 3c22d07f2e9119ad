-- The analyze breakdown of each session's active chain by content type:
-- text, thinking, tool_use, tool_result, image, command markup,
-- attachments and the system prompt.
CREATE VIEW analyze_by_type AS
SELECT b.file_id, b.session_id, b.kind AS category,
       count(*) AS items, sum(b.chars) AS chars, sum(b.signature_chars) AS signature_chars,
       sum(b.tokens) AS tokens
FROM blocks b
JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset
GROUP BY b.file_id, b.kind
UNION ALL
SELECT a.file_id, a.session_id,
       CASE WHEN a.policy = 'system-prompt' THEN 'system_prompt' ELSE 'attachment' END,
       count(*), NULL, NULL,
       CASE WHEN a.policy = 'system-prompt' THEN max(a.tokens) ELSE sum(a.tokens) END
FROM attachments a
JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset
GROUP BY a.file_id, a.policy = 'system-prompt';
