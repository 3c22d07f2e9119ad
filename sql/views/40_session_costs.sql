-- One row per session file: size on disk, the active chain's estimated
-- context (chain records + the latest system-prompt snapshot, counted
-- once), what lies off the chain, the request journal, and the gauge.
-- Built from correlated subqueries so a filter on file_id (analyze)
-- computes one session, not all of them.
CREATE VIEW session_costs AS
WITH costs AS (
    SELECT
        s.*,
        f.path,
        f.gone,
        f.size AS file_bytes,
        (SELECT coalesce(sum(r.tokens), 0) FROM chain c
         JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
         WHERE c.file_id = s.file_id) AS chain_tokens,
        (SELECT coalesce(sum(r.length), 0) FROM chain c
         JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
         WHERE c.file_id = s.file_id) AS chain_bytes,
        (SELECT coalesce(sum(r.length), 0) FROM records r WHERE r.file_id = s.file_id) AS record_bytes,
        (SELECT coalesce(sum(r.length), 0) FROM records r WHERE r.file_id = s.file_id
           AND r.type IN ('api-request', 'api-request-blob', 'api-request-shape')) AS journal_bytes,
        (SELECT a.tokens FROM attachments a
         JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset
         WHERE a.file_id = s.file_id AND a.type = 'prompt_snapshot'
         ORDER BY a.offset DESC LIMIT 1) AS prompt_tokens
    FROM sessions s
    JOIN files f ON f.id = s.file_id
)
SELECT
    c.file_id,
    c.session_id,
    c.project,
    c.title,
    c.parent_session_id,
    c.path,
    c.gone,
    c.file_bytes,
    c.lines,
    c.messages,
    c.chain_length,
    c.model,
    c.version,
    c.first_timestamp,
    c.last_timestamp,
    c.chain_tokens,
    coalesce(c.prompt_tokens, 0) AS system_prompt_tokens,
    c.chain_tokens + coalesce(c.prompt_tokens, 0) AS est_context_tokens,
    c.record_bytes - c.chain_bytes - c.journal_bytes AS off_chain_bytes,
    c.journal_bytes,
    (SELECT g.gauge_tokens FROM context_gauge g WHERE g.file_id = c.file_id) AS gauge_tokens
FROM costs c;
