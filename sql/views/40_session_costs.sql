-- One row per session file: size on disk, the active chain's estimated
-- context (chain records + the latest system-prompt snapshot, counted
-- once), what lies off the chain, the request journal, and the gauge.
CREATE VIEW session_costs AS
WITH per_file AS (
    SELECT
        r.file_id,
        count(*) AS records,
        sum(r.length) AS bytes,
        sum(CASE WHEN c.pos IS NOT NULL THEN r.tokens ELSE 0 END) AS chain_tokens,
        sum(CASE WHEN c.pos IS NULL AND r.type NOT IN ('api-request', 'api-request-blob', 'api-request-shape')
                 THEN r.length ELSE 0 END) AS off_chain_bytes,
        sum(CASE WHEN r.type IN ('api-request', 'api-request-blob', 'api-request-shape')
                 THEN r.length ELSE 0 END) AS journal_bytes
    FROM records r
    LEFT JOIN chain c ON c.file_id = r.file_id AND c.offset = r.offset
    GROUP BY r.file_id
),
prompt AS (
    SELECT a.file_id, a.tokens,
           row_number() OVER (PARTITION BY a.file_id ORDER BY a.offset DESC) AS rn
    FROM attachments a
    JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset
    WHERE a.policy = 'system-prompt' AND a.type = 'prompt_snapshot'
)
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
    coalesce(p.chain_tokens, 0) AS chain_tokens,
    coalesce(pr.tokens, 0) AS system_prompt_tokens,
    coalesce(p.chain_tokens, 0) + coalesce(pr.tokens, 0) AS est_context_tokens,
    coalesce(p.off_chain_bytes, 0) AS off_chain_bytes,
    coalesce(p.journal_bytes, 0) AS journal_bytes,
    g.gauge_tokens
FROM sessions s
JOIN files f ON f.id = s.file_id
LEFT JOIN per_file p ON p.file_id = s.file_id
LEFT JOIN prompt pr ON pr.file_id = s.file_id AND pr.rn = 1
LEFT JOIN context_gauge g ON g.file_id = s.file_id;
