-- Sessions whose file vanished from disk (Claude Code's cleanup, `claude
-- purge`, a hand), live sessions that lost a subagent transcript, and lone
-- subagent transcripts whose session file the catalog never held (swept
-- before txdb saw it, session_id the session their folder or their lines
-- name). The catalog still holds them; `txdb restore` gives them back. A
-- session's subagent transcripts are those in its folder (<id>/subagents/)
-- and, from releases that wrote them beside it, the agent-*.jsonl files of
-- its project folder whose lines name it (txdb/catalog/units.py).
-- Every row says what is gone: `what` is 'session' (its file gone, with
-- or without subagent transcripts), 'subagent transcripts' (the session
-- file still there) or 'lone subagent transcripts'; gone_files, gone_lines
-- and gone_bytes count only the gone transcripts (the session file when it
-- is gone, and its gone subagent transcripts); path is the first gone file
-- (the session file when it is gone). lines and file_bytes are the session
-- file's, gone or not (NULL for lone subagent transcripts: the catalog
-- holds no session file); subagents_gone counts the gone subagent
-- transcripts. Newest loss first. gone_at is ISO 8601 UTC (a catalog
-- refreshed by an older txdb kept it as "YYYY-MM-DD HH:MM:SS": shown the
-- same way). Read from files and sessions only (no scan of records).
CREATE VIEW gone_sessions AS
WITH agents AS (
    -- each subagent transcript with the path of the session file it belongs to
    SELECT a.id, a.gone, a.gone_at, a.size, a.path, a.project, sa.parent_session_id, sa.title, sa.lines,
           sa.first_timestamp, sa.last_timestamp,
           CASE WHEN substr(a.dir, -11) = '/subagents/' THEN substr(a.dir, 1, length(a.dir) - 11) || '.jsonl'
                WHEN sa.parent_session_id GLOB '[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]'
                THEN a.dir || sa.parent_session_id || '.jsonl'
           END AS session_path
    FROM (SELECT f.*, rtrim(f.path, replace(f.path, '/', '')) AS dir FROM files f WHERE f.kind = 'subagent') a
    LEFT JOIN sessions sa ON sa.file_id = a.id
),
owned AS (
    -- each subagent transcript with its session's file row (NULL: the catalog holds none): of the
    -- files at that path (the live one, versions kept aside), the one whose session id its lines
    -- name first (another session's file put at a gone session's path takes none of its subagents)
    SELECT g.*, (SELECT id FROM (SELECT f.id, f.session_id IS g.parent_session_id AS named, f.gone
                 FROM files f WHERE f.kind = 'session' AND (f.path = g.session_path
                 OR (f.path > g.session_path || '.archived-' AND f.path < g.session_path || '.archived.')))
                 ORDER BY named DESC, gone, id DESC LIMIT 1) AS session_file_id
    FROM agents g
),
subs AS (
    -- the gone subagent transcripts of each catalogued session file
    SELECT session_file_id AS file_id, count(*) AS gone, max(gone_at) AS gone_at, coalesce(sum(lines), 0) AS lines,
           coalesce(sum(size), 0) AS bytes, min(path) AS path
    FROM owned WHERE gone = 1 AND session_file_id IS NOT NULL
    GROUP BY session_file_id
),
lone AS (
    -- the subagent transcripts of a session file the catalog never held, by that session: lines, bytes
    -- and path of the gone ones only (a live one of the same session is not gone)
    SELECT unit, substr(unit, length(rtrim(unit, replace(unit, '/', ''))) + 1) AS name, gone, gone_at, path,
           project, title, first_timestamp, last_timestamp, lines, bytes
    FROM (SELECT coalesce(session_path, path) AS unit, sum(gone) AS gone,
                 max(CASE WHEN gone = 1 THEN gone_at END) AS gone_at,
                 min(CASE WHEN gone = 1 THEN path END) AS path, max(project) AS project, max(title) AS title,
                 min(first_timestamp) AS first_timestamp, max(last_timestamp) AS last_timestamp,
                 coalesce(sum(CASE WHEN gone = 1 THEN lines END), 0) AS lines,
                 coalesce(sum(CASE WHEN gone = 1 THEN size END), 0) AS bytes
          FROM owned WHERE session_file_id IS NULL
          GROUP BY coalesce(session_path, path)
          HAVING sum(gone) > 0)
)
SELECT * FROM (
    SELECT
        s.session_id,
        CASE WHEN f.gone = 1 THEN 'session' ELSE 'subagent transcripts' END AS what,
        s.project,
        s.title,
        strftime('%Y-%m-%dT%H:%M:%SZ', CASE WHEN f.gone = 1 THEN f.gone_at ELSE subs.gone_at END) AS gone_at,
        s.first_timestamp,
        s.last_timestamp,
        f.gone + coalesce(subs.gone, 0) AS gone_files,
        CASE WHEN f.gone = 1 THEN coalesce(s.lines, 0) ELSE 0 END + coalesce(subs.lines, 0) AS gone_lines,
        CASE WHEN f.gone = 1 THEN coalesce(f.size, 0) ELSE 0 END + coalesce(subs.bytes, 0) AS gone_bytes,
        CASE WHEN f.gone = 1 THEN f.path ELSE subs.path END AS path,
        s.lines,
        f.size AS file_bytes,
        coalesce(subs.gone, 0) AS subagents_gone
    FROM files f
    JOIN sessions s ON s.file_id = f.id
    LEFT JOIN subs ON subs.file_id = f.id
    WHERE f.kind = 'session' AND (f.gone = 1 OR subs.gone > 0)
    UNION ALL
    SELECT
        CASE WHEN name LIKE '%.jsonl' THEN substr(name, 1, length(name) - 6) ELSE name END,
        'lone subagent transcripts', project, title, strftime('%Y-%m-%dT%H:%M:%SZ', gone_at), first_timestamp,
        last_timestamp, gone, lines, bytes, path, NULL, NULL, gone
    FROM lone
)
ORDER BY gone_at DESC, last_timestamp DESC;
