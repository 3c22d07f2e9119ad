-- Sessions whose file vanished from disk (Claude Code's cleanup, `claude
-- purge`, a hand), live sessions that lost a subagent transcript (a lone
-- deleted subagent file: subagents_gone > 0, gone_at its loss), and lone
-- subagent transcripts whose session file the catalog never held (swept
-- before txdb saw it): session_id is the session their folder or their
-- lines name, file_bytes NULL, path the first of them. The catalog still
-- holds them; `txdb restore` gives them back. A session's subagent
-- transcripts are those in its folder (<id>/subagents/) and, from releases
-- that wrote them beside it, the agent-*.jsonl files of its project folder
-- whose lines name it (txdb/catalog/units.py). Newest loss first. gone_at
-- is ISO 8601 UTC (a catalog refreshed by an older txdb kept it as
-- "YYYY-MM-DD HH:MM:SS": shown the same way).
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
    SELECT session_file_id AS file_id, count(*) AS gone, max(gone_at) AS gone_at
    FROM owned WHERE gone = 1 AND session_file_id IS NOT NULL
    GROUP BY session_file_id
),
lone AS (
    SELECT unit, substr(unit, length(rtrim(unit, replace(unit, '/', ''))) + 1) AS name, gone, gone_at, path,
           project, title, first_timestamp, last_timestamp, lines
    FROM (SELECT coalesce(session_path, path) AS unit, sum(gone) AS gone, max(gone_at) AS gone_at,
                 min(path) AS path, max(project) AS project, max(title) AS title,
                 min(first_timestamp) AS first_timestamp, max(last_timestamp) AS last_timestamp,
                 sum(lines) AS lines
          FROM owned WHERE session_file_id IS NULL
          GROUP BY coalesce(session_path, path)
          HAVING sum(gone) > 0)
)
SELECT * FROM (
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
    UNION ALL
    SELECT
        CASE WHEN name LIKE '%.jsonl' THEN substr(name, 1, length(name) - 6) ELSE name END,
        project, title, strftime('%Y-%m-%dT%H:%M:%SZ', gone_at), first_timestamp, last_timestamp, lines,
        NULL, gone, path
    FROM lone
)
ORDER BY gone_at DESC, last_timestamp DESC;
