-- The context one usage row records, by the gauge's rule
-- (estimate.recorded_context, held to it by tests/test_rules.py): the three
-- context fields (input + cache read + cache creation, integers from 1 to
-- records.MAX_COUNT only) of the last usage.iterations[] entry when it is an object, else of
-- the totals. Stated once here, over both sets of figures a row keeps:
--   gauge_tokens: the file's current figures (usage.gauge_*, lowered by a
--                 usage reset): what Claude Code reads on resume;
--   api_gauge:    the API's own (usage's columns, never lowered): what the
--                 turn measured when it ran (the session page's context chart).
-- Also billed_tokens: input + output + cache read + cache creation as the
-- API recorded them, the one billed total (billed_usage and its readers).
-- context_gauge, the chart and billed_usage read this view.
CREATE VIEW usage_context AS
SELECT
    c.*,
    coalesce(c.gauge_iterations_context, c.gauge_totals_context) AS gauge_tokens
FROM (
    SELECT
        -- usage's columns, gauge_iterations whole (stored NULL when it is
        -- iterations, 'null' when the file holds none: migration 044)
        u.file_id, u.message_id, u.offset, u.request_id, u.session_id, u.timestamp, u.model, u.input_tokens,
        u.output_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens, u.ephemeral_5m_input_tokens,
        u.ephemeral_1h_input_tokens, u.service_tier, u.iterations, u.gauge_input_tokens,
        u.gauge_cache_read_input_tokens, u.gauge_cache_creation_input_tokens,
        nullif(coalesce(u.gauge_iterations, u.iterations), 'null') AS gauge_iterations,
        u.in_file, u.rewritten, u.invalid, u.billed,
        max(coalesce(u.gauge_input_tokens, 0), 0) + max(coalesce(u.gauge_cache_read_input_tokens, 0), 0)
            + max(coalesce(u.gauge_cache_creation_input_tokens, 0), 0) AS gauge_totals_context,
        CASE WHEN json_type(coalesce(u.gauge_iterations, u.iterations), '$[#-1]') = 'object' THEN
            (SELECT coalesce(sum(CASE WHEN j.type = 'integer' AND j.value BETWEEN 1 AND 999999999999999 THEN j.value END), 0)
             FROM json_each(coalesce(u.gauge_iterations, u.iterations), '$[#-1]') j
             WHERE j.key IN ('input_tokens', 'cache_read_input_tokens', 'cache_creation_input_tokens'))
        END AS gauge_iterations_context,
        CASE WHEN json_type(u.iterations, '$[#-1]') = 'object' THEN
            (SELECT coalesce(sum(CASE WHEN j.type = 'integer' AND j.value BETWEEN 1 AND 999999999999999 THEN j.value END), 0)
             FROM json_each(u.iterations, '$[#-1]') j
             WHERE j.key IN ('input_tokens', 'cache_read_input_tokens', 'cache_creation_input_tokens'))
        ELSE
            max(coalesce(u.input_tokens, 0), 0) + max(coalesce(u.cache_read_input_tokens, 0), 0)
            + max(coalesce(u.cache_creation_input_tokens, 0), 0)
        END AS api_gauge,
        coalesce(u.input_tokens, 0) + coalesce(u.output_tokens, 0)
            + coalesce(u.cache_read_input_tokens, 0) + coalesce(u.cache_creation_input_tokens, 0) AS billed_tokens
    FROM usage u
) c;
