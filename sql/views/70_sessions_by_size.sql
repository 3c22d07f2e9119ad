-- The largest session files on disk, biggest first, with the context gauge
-- Claude Code recorded on the last turn. `conversation` opens the session
-- page in Datasette. (session_costs adds off-chain and journal bytes, at
-- the price of reading every record.)
CREATE VIEW sessions_by_size AS
SELECT
    s.file_id AS conversation,
    s.file_id,
    s.session_id,
    s.project,
    s.title,
    f.kind,
    f.size AS file_bytes,
    s.lines,
    s.messages,
    s.chain_length,
    -- correlated, so a page or count that does not show it never computes it
    (SELECT g.gauge_tokens FROM context_gauge g WHERE g.file_id = s.file_id) AS gauge_tokens,
    s.model,
    s.version,
    s.first_timestamp,
    s.last_timestamp,
    f.gone,
    f.path
FROM sessions s
JOIN files f ON f.id = s.file_id
ORDER BY f.size DESC;
