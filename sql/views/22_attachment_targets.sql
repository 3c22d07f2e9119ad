-- One row per attachment line, the target view of strip-attachments, with
-- what the default policy does: keep the newest of each superseded type,
-- keep everything else; free types (render to nothing) are skipped.
-- policy_keeps is the SQL form of policy.attachment_decision (N = 1) and
-- the only one: attachments_by_type and attachment_policy read it here.
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
    -- ISO 8601 in UTC as every view gives it (2026-11-23T08:00:01.000Z); age_days compares with now in any format
    strftime('%Y-%m-%dT%H:%M:%fZ', a.timestamp) AS timestamp,
    round(julianday('now') - julianday(a.timestamp), 4) AS age_days,
    a.type,
    a.policy,
    a.tokens,
    a.from_rendered,
    a.free,
    a.hook_event,
    a.newest_rank,
    CASE
        WHEN a.policy <> 'superseded' THEN 1
        -- newest_rank <= 1, asked as "no newer line of its type" (stops early)
        WHEN NOT EXISTS (SELECT 1 FROM attachments n WHERE n.file_id = a.file_id
                         AND n.offset > a.offset AND n.type IS a.type) THEN 1
        WHEN a.free = 1 THEN 1
        ELSE 0
    END AS policy_keeps,
    r.length AS bytes
FROM (
    -- 1 = the newest line of its type in the file. A correlated count, not a
    -- window: the view stays flattenable, so a filter on file_id reads one
    -- session, and the count runs only where a query uses it.
    SELECT x.*, (SELECT count(*) FROM attachments n
                 WHERE n.file_id = x.file_id AND n.offset >= x.offset AND n.type IS x.type) AS newest_rank
    FROM attachments x
) a
JOIN records r ON r.file_id = a.file_id AND r.offset = a.offset
JOIN files f ON f.id = a.file_id
LEFT JOIN sessions s ON s.file_id = a.file_id
LEFT JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset;
