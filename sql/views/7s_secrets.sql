-- The secrets the catalog holds (secret_findings, found by `txdb secrets
-- scan`), per session file, type and where they were found (the block's
-- kind and tool, the attachment's type, `line <type>` for the rest of a
-- raw line, `file path|root|project` for the file's own names,
-- `sidecar <rel>` for a file of the session's folder): how many findings, how many
-- distinct secrets, and the first line of the file that holds one. Never
-- the secret itself.
CREATE VIEW secrets AS
SELECT
    f.file_id,
    s.session_id,
    s.project,
    s.title,
    f.type,
    CASE WHEN f.idx = -1 THEN 'attachment ' || coalesce(a.type, '?')
         WHEN f.idx = -2 THEN 'line ' || coalesce(r.type, '?')
         WHEN f.idx = -3 THEN 'file ' || f.field
         WHEN f.idx = -4 THEN 'sidecar ' || f.field
         ELSE b.kind || coalesce(' ' || b.tool_name, '') END AS found_in,
    count(*) AS count,
    count(DISTINCT f.secret_sha256) AS distinct_secrets,
    min(r.line) AS first_line
FROM secret_findings f
LEFT JOIN blocks b ON b.file_id = f.file_id AND b.offset = f.offset AND b.idx = f.idx
LEFT JOIN attachments a ON a.file_id = f.file_id AND a.offset = f.offset
LEFT JOIN records r ON r.file_id = f.file_id AND r.offset = f.offset
LEFT JOIN sessions s ON s.file_id = f.file_id
GROUP BY f.file_id, f.type, found_in;
