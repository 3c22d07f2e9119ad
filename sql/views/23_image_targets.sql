-- One row per image in the catalog, or per tool_result holding images: the
-- catalog view of `txdb list-images` and the target view of
-- `txdb replace-images --where "..."` (a row selects its record's images).
-- A message's own image block has its media type, pixel size, sha256 and
-- base64 size; a tool_result row counts its nested images (`images`) and
-- carries the largest one's media type and pixel size (`txdb list-images
-- SESSION` lists each nested image with its sha256).
CREATE VIEW image_targets AS
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
    CASE b.kind WHEN 'image' THEN 'message' ELSE 'tool_result' END AS "where",
    CASE b.kind WHEN 'image' THEN 1 ELSE b.images END AS images,
    b.tool_use_id,
    b.media_type,
    b.width,
    b.height,
    b.image_sha256,
    CASE b.kind WHEN 'image' THEN b.chars END AS base64_chars,
    b.tokens,
    b.kind
FROM blocks b
JOIN records r ON r.file_id = b.file_id AND r.offset = b.offset
JOIN files f ON f.id = b.file_id
LEFT JOIN sessions s ON s.file_id = b.file_id
LEFT JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset
WHERE b.kind = 'image' OR (b.kind = 'tool_result' AND b.images > 0);
