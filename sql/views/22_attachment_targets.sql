-- One row per attachment line, the target view of strip-attachments, with
-- what the default policy does: keep the newest of each superseded type,
-- keep everything else; free types (render to nothing) are skipped.
CREATE VIEW attachment_targets AS
SELECT
    a.file_id,
    f.path,
    a.session_id,
    s.title,
    s.project,
    r.line,
    a.offset,
    c.pos,
    CASE WHEN c.pos IS NOT NULL THEN 1 ELSE 0 END AS on_chain,
    -- SQLite's own format (UTC), so `timestamp < datetime('now', '-7 days')` is exact
    strftime('%Y-%m-%d %H:%M:%f', a.timestamp) AS timestamp,
    a.type,
    a.policy,
    a.tokens,
    a.from_rendered,
    a.free,
    a.hook_event,
    row_number() OVER (PARTITION BY a.file_id, a.type ORDER BY a.offset DESC) AS newest_rank,
    CASE
        WHEN a.policy <> 'superseded' THEN 1
        WHEN a.free = 1 THEN 1
        WHEN row_number() OVER (PARTITION BY a.file_id, a.type ORDER BY a.offset DESC) = 1 THEN 1
        ELSE 0
    END AS policy_keeps,
    r.length AS bytes
FROM attachments a
JOIN records r ON r.file_id = a.file_id AND r.offset = a.offset
JOIN files f ON f.id = a.file_id
LEFT JOIN sessions s ON s.file_id = a.file_id
LEFT JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset;
