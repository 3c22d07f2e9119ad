-- Sessions by how full Claude Code's context gauge was on the last
-- assistant turn of the active chain, judged against the session's own
-- window (context_gauge.window_tokens: 1M tokens for models named with
-- [1m] and for sessions that recorded more than 200k, else 200k).
-- status: over (past the window), near (80% of it or more), ok.
-- Sessions only: a subagent's transcript cannot be resumed, so it is never
-- near a limit a user can act on.
CREATE VIEW sessions_near_limit AS
SELECT
    w.file_id AS conversation,
    w.file_id,
    w.session_id,
    w.project,
    w.title,
    w.model,
    w.gauge_tokens,
    w.window_tokens,
    round(100.0 * w.gauge_tokens / 200000, 1) AS pct_of_200k,
    round(100.0 * w.gauge_tokens / w.window_tokens, 1) AS pct_of_window,
    CASE
        WHEN w.gauge_tokens > w.window_tokens THEN 'over'
        WHEN w.gauge_tokens >= 0.8 * w.window_tokens THEN 'near'
        ELSE 'ok'
    END AS status,
    w.last_turn_at,
    w.chain_length,
    w.last_timestamp
FROM (
    SELECT g.file_id, s.session_id, s.project, s.title, g.model, g.gauge_tokens,
           g.window_tokens,
           g.timestamp AS last_turn_at, s.chain_length, s.last_timestamp
    FROM context_gauge g
    JOIN sessions s ON s.file_id = g.file_id
    JOIN files f ON f.id = g.file_id
    WHERE f.kind = 'session'
) w
ORDER BY w.gauge_tokens DESC;
