-- The context gauge as Claude Code reads it: input + cache read + cache
-- creation recorded on the last assistant turn of the active chain (newer
-- builds read the same three fields from usage.iterations[], when present).
-- It reads the figures the file holds now (usage.gauge_*: lowered by a
-- usage reset), not the API's (usage's own columns, kept for the record).
-- The rule is estimate.recorded_context's (tests/test_rules.py holds the
-- two together). Correlated per session, so a filter on file_id touches
-- one session only.
CREATE VIEW context_gauge AS
WITH last_turn AS (
    SELECT s.file_id,
           (SELECT c.pos FROM chain c
            JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
            WHERE c.file_id = s.file_id AND r.type = 'assistant'
              AND r.model IS NOT '<synthetic>'
            ORDER BY c.pos DESC LIMIT 1) AS pos  -- walks back from the leaf, stops at the first
    FROM sessions s
)
SELECT
    lt.file_id,
    r.session_id,
    lt.pos,
    r.timestamp,
    r.message_id,
    r.model,
    u.gauge_input_tokens AS input_tokens,
    u.gauge_cache_read_input_tokens AS cache_read_input_tokens,
    u.gauge_cache_creation_input_tokens AS cache_creation_input_tokens,
    u.output_tokens,
    max(coalesce(u.gauge_input_tokens, 0), 0) + max(coalesce(u.gauge_cache_read_input_tokens, 0), 0)
        + max(coalesce(u.gauge_cache_creation_input_tokens, 0), 0) AS recorded_context,
    CASE WHEN json_type(u.gauge_iterations, '$[#-1]') = 'object' THEN
        (SELECT coalesce(sum(CASE WHEN j.type = 'integer' AND j.value > 0 THEN j.value END), 0)
         FROM json_each(u.gauge_iterations, '$[#-1]') j
         WHERE j.key IN ('input_tokens', 'cache_read_input_tokens', 'cache_creation_input_tokens'))
    END AS iterations_context,
    -- estimate.recorded_context's rule, in SQL: the last iterations[] entry
    -- when it is an object, else the totals; positive integers only
    CASE WHEN json_type(u.gauge_iterations, '$[#-1]') = 'object' THEN
        (SELECT coalesce(sum(CASE WHEN j.type = 'integer' AND j.value > 0 THEN j.value END), 0)
         FROM json_each(u.gauge_iterations, '$[#-1]') j
         WHERE j.key IN ('input_tokens', 'cache_read_input_tokens', 'cache_creation_input_tokens'))
    ELSE
        max(coalesce(u.gauge_input_tokens, 0), 0) + max(coalesce(u.gauge_cache_read_input_tokens, 0), 0)
        + max(coalesce(u.gauge_cache_creation_input_tokens, 0), 0)
    END AS gauge_tokens,
    -- what the API recorded for that turn (differs after a usage reset)
    coalesce(u.input_tokens, 0) + coalesce(u.cache_read_input_tokens, 0)
        + coalesce(u.cache_creation_input_tokens, 0) AS api_context
FROM last_turn lt
-- CROSS JOIN fixes the order: sessions first, never a scan of chain or records
CROSS JOIN chain c ON c.file_id = lt.file_id AND c.pos = lt.pos
CROSS JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
LEFT JOIN usage u ON u.file_id = r.file_id AND u.message_id = r.message_id;
