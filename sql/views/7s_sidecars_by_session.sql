-- The files the catalog keeps beside each session (tool-results/,
-- persisted/, subagents' .meta.json), per session folder: how many, their
-- bytes, what the catalog stores for them (compressed, each content once
-- across the catalog), how many vanished from disk. Largest first.
CREATE VIEW sidecars_by_session AS
SELECT
    s.file_id,
    sc.session_id,
    sc.project,
    s.title,
    count(*) AS sidecars,
    sum(sc.size) AS bytes,
    sum(b.stored_bytes) AS stored_bytes,
    sum(sc.gone) AS gone,
    max(sc.size) AS largest
FROM sidecars sc
LEFT JOIN (SELECT sha256, length(data) AS stored_bytes FROM blobs) b ON b.sha256 = sc.sha256
LEFT JOIN sessions s ON s.file_id = (SELECT min(s2.file_id) FROM sessions s2
    WHERE s2.session_id = sc.session_id AND s2.project IS sc.project AND s2.parent_session_id IS NULL)
GROUP BY sc.session_id, sc.project
ORDER BY bytes DESC;
