-- Tool calls on every session's active chain by tool: calls, errors, and
-- the context their inputs and results take, with the tool's share of the
-- session's tool tokens.
CREATE VIEW context_by_tool AS
SELECT
    t.file_id AS conversation,
    t.file_id,
    s.session_id,
    s.project,
    s.title,
    t.tool_name,
    t.calls,
    t.errors,
    t.input_tokens,
    t.result_tokens,
    t.tokens,
    round(100.0 * t.tokens / nullif(sum(t.tokens) OVER (PARTITION BY t.file_id), 0), 1) AS pct_of_tool_tokens
FROM analyze_by_tool t
JOIN sessions s ON s.file_id = t.file_id
ORDER BY t.tokens DESC;
