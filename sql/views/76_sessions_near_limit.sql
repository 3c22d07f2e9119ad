-- Sessions by how full Claude Code's context gauge was on the last
-- assistant turn of the active chain. The window is 200k tokens, or 1M for
-- models named with [1m] and for sessions that recorded more than 200k.
-- status: over (past 200k), near (80% of the window or more), ok.
CREATE VIEW sessions_near_limit AS
SELECT
    g.file_id AS conversation,
    g.file_id,
    s.session_id,
    s.project,
    s.title,
    g.model,
    g.gauge_tokens,
    CASE WHEN g.model LIKE '%[1m]%' OR g.gauge_tokens > 200000 THEN 1000000 ELSE 200000 END AS window_tokens,
    round(100.0 * g.gauge_tokens / 200000, 1) AS pct_of_200k,
    round(100.0 * g.gauge_tokens /
          CASE WHEN g.model LIKE '%[1m]%' OR g.gauge_tokens > 200000 THEN 1000000 ELSE 200000 END, 1) AS pct_of_window,
    CASE
        WHEN g.gauge_tokens > 200000 THEN 'over'
        WHEN g.gauge_tokens >= 0.8 * CASE WHEN g.model LIKE '%[1m]%' THEN 1000000 ELSE 200000 END THEN 'near'
        ELSE 'ok'
    END AS status,
    g.timestamp AS last_turn_at,
    s.chain_length,
    s.last_timestamp
FROM context_gauge g
JOIN sessions s ON s.file_id = g.file_id
ORDER BY g.gauge_tokens DESC;
