-- Every tool call with the context its input and its result take, the
-- costliest first: candidates for strip-tools and persist. A call and its
-- result are paired by tool_use_id within the file (one pass over blocks,
-- grouped, instead of a lookup per call).
CREATE VIEW costliest_tool_calls AS
WITH pairs AS (
    SELECT file_id, tool_use_id,
           min(CASE WHEN kind = 'tool_use' THEN offset END) AS use_offset,
           min(CASE WHEN kind = 'tool_use' THEN idx END) AS use_idx,
           sum(CASE WHEN kind = 'tool_use' THEN tokens ELSE 0 END) AS input_tokens,
           sum(CASE WHEN kind = 'tool_result' THEN tokens ELSE 0 END) AS result_tokens,
           sum(CASE WHEN kind = 'tool_result' THEN chars END) AS result_chars,
           sum(CASE WHEN kind = 'tool_result' THEN images END) AS result_images,
           max(CASE WHEN kind = 'tool_result' THEN is_error END) AS is_error
    FROM blocks
    WHERE kind IN ('tool_use', 'tool_result') AND tool_use_id IS NOT NULL
    GROUP BY file_id, tool_use_id
), ranked AS (
    SELECT *, input_tokens + result_tokens AS total_tokens FROM pairs
    WHERE use_offset IS NOT NULL
    ORDER BY input_tokens + result_tokens DESC
)
SELECT p.file_id AS conversation, p.file_id, s.project, s.title, r.line, c.pos,
       CASE WHEN c.pos IS NOT NULL THEN 1 ELSE 0 END AS on_chain, r.timestamp,
       u.tool_name, p.tool_use_id, p.input_tokens, p.result_tokens, p.total_tokens,
       p.result_chars, p.result_images, p.is_error, substr(u.text, 1, 160) AS input
FROM ranked p
JOIN blocks u ON u.file_id = p.file_id AND u.offset = p.use_offset AND u.idx = p.use_idx
LEFT JOIN records r ON r.file_id = p.file_id AND r.offset = p.use_offset
LEFT JOIN sessions s ON s.file_id = p.file_id
LEFT JOIN chain c ON c.file_id = p.file_id AND c.offset = p.use_offset
ORDER BY p.total_tokens DESC;
