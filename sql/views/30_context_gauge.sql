-- The context gauge as Claude Code reads it: input + cache read + cache
-- creation recorded on the last assistant turn of the active chain (newer
-- builds read the same three fields from usage.iterations[], when present).
-- It reads the figures the file holds now (usage.gauge_*: lowered by a
-- usage reset), not the API's (usage's own columns, kept for the record).
-- The rule is estimate.recorded_context's, stated in SQL once by the
-- usage_context view (tests/test_rules.py holds the two together).
-- Correlated per session, so a filter on file_id touches one session only.
CREATE VIEW context_gauge AS
WITH last_turn AS (
    SELECT s.file_id, s.long_context,
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
    coalesce(u.gauge_totals_context, 0) AS recorded_context,
    u.gauge_iterations_context AS iterations_context,
    -- the gauge's rule, stated once in usage_context
    coalesce(u.gauge_tokens, 0) AS gauge_tokens,
    -- the session's window, stated once here (rescue.window_of states it in
    -- Python, held to this by tests/test_rules.py): 1M when any turn the file
    -- records ran on a model named with [1m] or recorded a context past 200k
    -- (only a 1M window holds that; the window is the model's, not the
    -- current size, so a session brought back under 200k keeps it); else
    -- the window the session's release runs the last turn's model in
    -- (model_windows: the newest known release at or before it, the newest
    -- when the session names none), else 200k. (The first test is kept by
    -- refresh in sessions.long_context, txdb/catalog/ingest/window.py;
    -- looked up here while a catalog from before migration 042 has it NULL.)
    CASE WHEN coalesce(lt.long_context,
                       EXISTS (SELECT 1 FROM usage_context w WHERE w.file_id = lt.file_id
                               AND (w.model LIKE '%[1m]%' OR w.gauge_tokens > 200000)))
         THEN 1000000
         -- (the release's key found once per session, then its patterns)
         WHEN EXISTS (SELECT 1 FROM (
                          SELECT coalesce(max(k.release_key), (SELECT min(release_key) FROM model_windows)) AS key
                          FROM model_windows k
                          WHERE k.release_key <= coalesce(
                              (SELECT CAST(v.version AS INTEGER) * 1000000
                                      + CAST(substr(v.version, instr(v.version, '.') + 1) AS INTEGER) * 1000
                                      + CAST(substr(substr(v.version, instr(v.version, '.') + 1),
                                                    instr(substr(v.version, instr(v.version, '.') + 1), '.') + 1)
                                             AS INTEGER)
                               FROM sessions v WHERE v.file_id = lt.file_id AND v.version IS NOT NULL),
                              1000000000)) rk
                      JOIN model_windows mw ON mw.release_key = rk.key
                      WHERE lower(r.model) GLOB mw.pattern)
         THEN 1000000 ELSE 200000 END
        AS window_tokens,
    -- what the API recorded for that turn (differs after a usage reset)
    coalesce(u.input_tokens, 0) + coalesce(u.cache_read_input_tokens, 0)
        + coalesce(u.cache_creation_input_tokens, 0) AS api_context
FROM last_turn lt
-- CROSS JOIN fixes the order: sessions first, never a scan of chain or records
CROSS JOIN chain c ON c.file_id = lt.file_id AND c.pos = lt.pos
CROSS JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
LEFT JOIN usage_context u ON u.file_id = r.file_id AND u.message_id = r.message_id;
