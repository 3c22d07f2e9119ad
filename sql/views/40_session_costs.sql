-- One row per session file: size on disk, the active chain's estimated
-- context (chain records + the latest system-prompt snapshot, counted
-- once), what lies off the chain, the request journal, and the gauge.
-- The sums are kept on `sessions` by refresh; the rest is looked up per
-- session, so a filter on file_id (analyze) computes one session only.
CREATE VIEW session_costs AS
SELECT
    s.file_id,
    s.session_id,
    s.project,
    s.title,
    s.parent_session_id,
    f.path,
    f.gone,
    f.size AS file_bytes,
    s.lines,
    s.messages,
    s.chain_length,
    s.model,
    s.version,
    s.first_timestamp,
    s.last_timestamp,
    s.chain_tokens,
    coalesce(p.tokens, 0) AS system_prompt_tokens,
    s.chain_tokens + coalesce(p.tokens, 0) AS est_context_tokens,
    s.record_bytes - s.chain_bytes - s.journal_bytes AS off_chain_bytes,
    s.journal_bytes,
    (SELECT g.gauge_tokens FROM context_gauge g WHERE g.file_id = s.file_id) AS gauge_tokens
FROM sessions s
JOIN files f ON f.id = s.file_id
LEFT JOIN attachments p ON p.file_id = s.file_id AND p.offset = (
    SELECT a.offset FROM attachments a
    JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset
    WHERE a.file_id = s.file_id AND a.type = 'prompt_snapshot'
    ORDER BY a.offset DESC LIMIT 1);
