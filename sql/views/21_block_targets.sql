-- One row per content block: the target view of strip-tools,
-- strip-thinking and persist (txdb strip-tools --where "...").
-- result_tokens / input_tokens pair a tool_use with its tool_result in the
-- same file, so either row of a pair can be selected by either size.
CREATE VIEW block_targets AS
SELECT
    b.file_id,
    f.path,
    b.session_id,
    s.title,
    s.project,
    r.line,
    b.offset,
    b.idx,
    c.pos,
    CASE WHEN c.pos IS NOT NULL THEN 1 ELSE 0 END AS on_chain,
    -- ISO 8601 in UTC as every view gives it (2026-11-23T08:00:01.000Z); age_days compares with now in any format
    strftime('%Y-%m-%dT%H:%M:%fZ', r.timestamp) AS timestamp,
    round(julianday('now') - julianday(r.timestamp), 4) AS age_days,
    r.model,
    b.role,
    b.type,
    b.kind,
    b.tool_name,
    b.tool_use_id,
    b.is_error,
    b.chars,
    b.signature_chars,
    b.tokens,
    CASE b.kind
        WHEN 'tool_use' THEN b.tokens
        WHEN 'tool_result' THEN (SELECT u.tokens FROM blocks u WHERE u.file_id = b.file_id
                                  AND u.tool_use_id = b.tool_use_id AND u.kind = 'tool_use' LIMIT 1)
    END AS input_tokens,
    CASE b.kind
        WHEN 'tool_result' THEN b.tokens
        WHEN 'tool_use' THEN (SELECT t.tokens FROM blocks t WHERE t.file_id = b.file_id
                               AND t.tool_use_id = b.tool_use_id AND t.kind = 'tool_result' LIMIT 1)
    END AS result_tokens,
    b.media_type,
    b.width,
    b.height,
    b.image_sha256
FROM blocks b
JOIN records r ON r.file_id = b.file_id AND r.offset = b.offset
JOIN files f ON f.id = b.file_id
LEFT JOIN sessions s ON s.file_id = b.file_id
LEFT JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset;
