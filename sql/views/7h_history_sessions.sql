-- The sessions ~/.claude/history.jsonl names (its prompts carry their
-- sessionId in newer releases), joined to the catalog: 'on disk',
-- 'gone' (its transcript vanished after txdb catalogued it: `txdb restore`
-- gives it back), 'pruned' (txdb catalogued it, then `txdb prune` deleted
-- its archive: table pruned_sessions) or 'gone before txdb' (swept before
-- txdb ever saw it: its prompts here are all that is left; `txdb history
-- SESSION` prints them).
CREATE VIEW history_sessions AS
SELECT
    h.session_id,
    h.project,
    h.cwd,
    (SELECT x.display FROM history x WHERE x.session_id = h.session_id
        ORDER BY x.timestamp_ms, x.id LIMIT 1) AS first_prompt_text,
    h.prompts,
    h.first_prompt,
    h.last_prompt,
    CASE WHEN f.file_id IS NOT NULL THEN CASE WHEN f.on_disk = 0 THEN 'gone' ELSE 'on disk' END
         WHEN EXISTS (SELECT 1 FROM pruned_sessions p WHERE p.session_id = h.session_id AND p.kind = 'session')
         THEN 'pruned' ELSE 'gone before txdb' END AS status,
    f.file_id
FROM (
    SELECT session_id, max(project) AS project, max(cwd) AS cwd, count(*) AS prompts,
           min(timestamp) AS first_prompt, max(timestamp) AS last_prompt
    FROM history WHERE session_id IS NOT NULL GROUP BY session_id
) h
LEFT JOIN (
    SELECT session_id, min(id) AS file_id, max(gone = 0) AS on_disk
    FROM files WHERE kind = 'session' GROUP BY session_id
) f ON f.session_id = h.session_id;
