-- One row per session file: size on disk, the active chain's estimated
-- context (chain records + the latest system-prompt snapshot, counted
-- once), what lies off the chain, the request journal, and the gauge.
-- est_context_tokens is the calibrated estimate refresh keeps on
-- `sessions` (txdb.estimate: the raw figure fitted against the context the
-- API recorded on the session's own turns); raw_context_tokens is chars/4
-- (txdb.tokens) of the chain plus the system prompt, the figure the
-- analyze breakdowns add up to.
-- The sums are kept on `sessions` by refresh; the rest is looked up per
-- session, so a filter on file_id (analyze) computes one session only.
CREATE VIEW session_costs AS
SELECT *, coalesce(calibrated_tokens, chain_tokens + system_prompt_tokens) AS est_context_tokens,
       chain_tokens + system_prompt_tokens AS raw_context_tokens
FROM (
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
        s.est_context_tokens AS calibrated_tokens,
        s.est_method,
        s.est_turns,
        -- The system prompt (and deferred tool schemas) go with every
        -- request, wherever their latest snapshot lies: counted once each.
        (SELECT coalesce(sum(sp.tokens), 0) FROM system_prompt sp
         WHERE sp.file_id = s.file_id) AS system_prompt_tokens,
        s.record_bytes - s.chain_bytes - s.journal_bytes AS off_chain_bytes,
        s.journal_bytes,
        (SELECT g.gauge_tokens FROM context_gauge g WHERE g.file_id = s.file_id) AS gauge_tokens,
        -- What the session's API messages cost in USD (billed_cost; NULL when
        -- none is priced), and how many the price library could not price:
        -- a session's own file and its subagents' (the user paid for them;
        -- `txdb cost --by session` groups the same files), a subagent's own.
        (SELECT round(sum(c.cost_usd), 6) FROM billed_cost c WHERE c.file_id IN (
            SELECT s.file_id UNION ALL SELECT a.file_id FROM sessions a
            WHERE s.parent_session_id IS NULL AND a.parent_session_id = s.session_id)) AS cost_usd,
        (SELECT sum(c.cost_usd IS NULL) FROM billed_cost c WHERE c.file_id IN (
            SELECT s.file_id UNION ALL SELECT a.file_id FROM sessions a
            WHERE s.parent_session_id IS NULL AND a.parent_session_id = s.session_id)) AS unpriced_messages
    FROM sessions s
    JOIN files f ON f.id = s.file_id
);
