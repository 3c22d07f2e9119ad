-- Sessions by the context their active chain sends on --resume, fullest
-- first: the estimate (chain records plus the latest system-prompt
-- snapshot, counted once: the same figure as session_costs and analyze)
-- beside the gauge Claude Code recorded on the last assistant turn.
-- est_context_tokens is calibrated on the usage the API recorded;
-- raw_context_tokens is chars/4 of the same chain.
CREATE VIEW sessions_by_context AS
SELECT
    c.file_id AS conversation,
    c.file_id,
    c.session_id,
    c.project,
    c.title,
    f.kind,
    c.est_context_tokens,
    c.chain_tokens,
    c.system_prompt_tokens,
    c.raw_context_tokens,
    c.gauge_tokens,
    c.chain_length,
    c.file_bytes,
    c.model,
    c.version,
    c.last_timestamp,
    c.path
FROM session_costs c
JOIN files f ON f.id = c.file_id
ORDER BY c.est_context_tokens DESC;
