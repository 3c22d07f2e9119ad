-- Sessions whose file vanished from disk (Claude Code's cleanup, `claude
-- purge`, a hand), and live sessions that lost a subagent transcript (a
-- lone deleted subagent file: subagents_gone > 0, gone_at its loss): the
-- catalog still holds them; `txdb restore` gives them back. Newest loss
-- first. gone_at is ISO 8601 UTC (a catalog refreshed by an older txdb
-- kept it as "YYYY-MM-DD HH:MM:SS": shown the same way).
CREATE VIEW gone_sessions AS
WITH subs AS (
    SELECT f.id AS file_id, count(a.id) AS gone, max(a.gone_at) AS gone_at
    FROM files f JOIN files a ON a.kind = 'subagent' AND a.gone = 1
        AND substr(a.path, 1, length(f.path) - 6) = substr(f.path, 1, length(f.path) - 6)
        AND substr(a.path, length(f.path) - 5, 11) = '/subagents/'
    WHERE f.kind = 'session'
    GROUP BY f.id
)
SELECT
    s.session_id,
    s.project,
    s.title,
    strftime('%Y-%m-%dT%H:%M:%SZ', CASE WHEN f.gone = 1 THEN f.gone_at ELSE subs.gone_at END) AS gone_at,
    s.first_timestamp,
    s.last_timestamp,
    s.lines,
    f.size AS file_bytes,
    coalesce(subs.gone, 0) AS subagents_gone,
    f.path
FROM files f
JOIN sessions s ON s.file_id = f.id
LEFT JOIN subs ON subs.file_id = f.id
WHERE f.kind = 'session' AND (f.gone = 1 OR subs.gone > 0)
ORDER BY gone_at DESC, s.last_timestamp DESC;
