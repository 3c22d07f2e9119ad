-- Tool calls on each session's active chain by tool name: calls, errors,
-- and the tokens of their inputs and results.
CREATE VIEW analyze_by_tool AS
SELECT b.file_id, b.session_id, coalesce(b.tool_name, '(unknown)') AS tool_name,
       sum(b.kind = 'tool_use') AS calls,
       sum(b.kind = 'tool_result' AND b.is_error = 1) AS errors,
       sum(CASE WHEN b.kind = 'tool_use' THEN b.tokens ELSE 0 END) AS input_tokens,
       sum(CASE WHEN b.kind = 'tool_result' THEN b.tokens ELSE 0 END) AS result_tokens,
       sum(b.tokens) AS tokens
FROM blocks b
JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset
WHERE b.kind IN ('tool_use', 'tool_result')
GROUP BY b.file_id, coalesce(b.tool_name, '(unknown)');
