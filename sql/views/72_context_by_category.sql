-- What fills the context of every session's active chain, by content
-- category (text, thinking, tool_use, tool_result, image, command markup,
-- attachments, system prompt), with each category's share of the session.
CREATE VIEW context_by_category AS
SELECT
    a.file_id AS conversation,
    a.file_id,
    s.session_id,
    s.project,
    s.title,
    a.category,
    a.items,
    a.chars,
    a.tokens,
    round(100.0 * a.tokens / nullif(sum(a.tokens) OVER (PARTITION BY a.file_id), 0), 1) AS pct_of_session
FROM analyze_by_type a
JOIN sessions s ON s.file_id = a.file_id
ORDER BY a.tokens DESC;
