-- Every tool call with the context its input and its result take: the
-- candidates for strip-tools and persist. Driven by the tool_use blocks,
-- each paired with its tool_result by (file, tool_use_id) through an index;
-- no ORDER BY here, so Datasette's count stays cheap: its metadata sorts
-- by total_tokens, costliest first (add ORDER BY total_tokens DESC in SQL).
CREATE VIEW costliest_tool_calls AS
SELECT u.file_id AS conversation, u.file_id, s.project, s.title, r.line, c.pos,
       CASE WHEN c.pos IS NOT NULL THEN 1 ELSE 0 END AS on_chain, r.timestamp,
       u.tool_name, u.tool_use_id, u.tokens AS input_tokens, coalesce(t.tokens, 0) AS result_tokens,
       u.tokens + coalesce(t.tokens, 0) AS total_tokens,
       t.chars AS result_chars, t.images AS result_images, t.is_error, substr(u.text, 1, 160) AS input
FROM blocks u
LEFT JOIN blocks t ON t.file_id = u.file_id AND t.tool_use_id = u.tool_use_id AND t.kind = 'tool_result'
LEFT JOIN records r ON r.file_id = u.file_id AND r.offset = u.offset
LEFT JOIN sessions s ON s.file_id = u.file_id
LEFT JOIN chain c ON c.file_id = u.file_id AND c.offset = u.offset
WHERE u.kind = 'tool_use' AND u.tool_use_id IS NOT NULL;
