-- Sessions by the context their active chain sends on --resume, fullest
-- first: the estimate (chain records plus the latest system-prompt
-- snapshot, counted once: the same figure as session_costs and analyze)
-- beside the gauge Claude Code recorded on the last assistant turn.
CREATE VIEW sessions_by_context AS
WITH chain_sum AS (
    SELECT c.file_id, sum(r.tokens) AS chain_tokens
    FROM chain c
    JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
    GROUP BY c.file_id
),
prompt AS (
    SELECT a.file_id, a.tokens,
           row_number() OVER (PARTITION BY a.file_id ORDER BY a.offset DESC) AS rn
    FROM attachments a
    JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset
    WHERE a.policy = 'system-prompt' AND a.type = 'prompt_snapshot'
)
SELECT
    s.file_id AS conversation,
    s.file_id,
    s.session_id,
    s.project,
    s.title,
    f.kind,
    coalesce(cs.chain_tokens, 0) + coalesce(p.tokens, 0) AS est_context_tokens,
    coalesce(cs.chain_tokens, 0) AS chain_tokens,
    coalesce(p.tokens, 0) AS system_prompt_tokens,
    g.gauge_tokens,
    s.chain_length,
    f.size AS file_bytes,
    s.model,
    s.version,
    s.last_timestamp,
    f.path
FROM sessions s
JOIN files f ON f.id = s.file_id
LEFT JOIN chain_sum cs ON cs.file_id = s.file_id
LEFT JOIN prompt p ON p.file_id = s.file_id AND p.rn = 1
LEFT JOIN context_gauge g ON g.file_id = s.file_id
ORDER BY est_context_tokens DESC;
