-- Every surgery applied to a session file, newest first, with what it
-- saved (estimated context tokens before and after) and the backup it left.
CREATE VIEW surgery_log AS
SELECT
    g.id,
    g.at,
    g.command,
    g.file_id AS conversation,
    g.session_id,
    s.project,
    s.title,
    g.records_changed,
    g.tokens_before,
    g.tokens_after,
    g.tokens_before - g.tokens_after AS tokens_saved,
    round(100.0 * (g.tokens_before - g.tokens_after) / nullif(g.tokens_before, 0), 1) AS pct_saved,
    g.arguments,
    g.path,
    g.backup_path
FROM surgeries g
LEFT JOIN sessions s ON s.file_id = g.file_id
ORDER BY g.at DESC, g.id DESC;
