-- Sessions whose file vanished from disk (Claude Code's cleanup, `claude
-- purge`, a hand): the catalog still holds them; `txdb restore` gives
-- them back. Newest loss first. gone_at is ISO 8601 UTC (a catalog
-- refreshed by an older txdb kept it as "YYYY-MM-DD HH:MM:SS": shown the same way).
CREATE VIEW gone_sessions AS
SELECT
    s.session_id,
    s.project,
    s.title,
    strftime('%Y-%m-%dT%H:%M:%SZ', f.gone_at) AS gone_at,
    s.first_timestamp,
    s.last_timestamp,
    s.lines,
    f.size AS file_bytes,
    (SELECT count(*) FROM files a WHERE a.kind = 'subagent' AND a.gone = 1
        AND substr(a.path, 1, length(f.path) - 6) = substr(f.path, 1, length(f.path) - 6)
        AND substr(a.path, length(f.path) - 5, 11) = '/subagents/') AS subagents_gone,
    f.path
FROM files f
JOIN sessions s ON s.file_id = f.id
WHERE f.gone = 1 AND f.kind = 'session'
ORDER BY f.gone_at DESC, s.last_timestamp DESC;
