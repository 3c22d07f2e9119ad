-- One row per record of every session's active chain: the target view of
-- `txdb compact-range --where "..."` (each run of consecutive positions
-- selected in a session is one range). `is_leaf` marks the record resuming
-- starts from, which no range may hold. To choose a stretch by what was
-- said, join the search views on uuid.
CREATE VIEW chain_targets AS
SELECT
    c.file_id,
    f.path,
    r.session_id,
    s.title,
    s.project,
    r.line,
    r.offset,
    c.pos,
    CASE WHEN c.pos = (SELECT max(c2.pos) FROM chain c2 WHERE c2.file_id = c.file_id) THEN 1 ELSE 0 END AS is_leaf,
    -- ISO 8601 in UTC as every view gives it (2026-11-23T08:00:01.000Z); age_days compares with now in any format
    strftime('%Y-%m-%dT%H:%M:%fZ', r.timestamp) AS timestamp,
    round(julianday('now') - julianday(r.timestamp), 4) AS age_days,
    r.type,
    r.subtype,
    r.role,
    r.uuid,
    r.is_meta,
    r.tokens
FROM chain c
JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
JOIN files f ON f.id = c.file_id
LEFT JOIN sessions s ON s.file_id = c.file_id;
