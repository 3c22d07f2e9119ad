-- The 5-hour billing blocks Claude's usage limits are counted in, over every
-- API message once (billed_cost): a block starts at its first message's
-- hour (UTC, floored) and holds the messages up to 5 hours after that
-- start; the first message after it starts the next block (so a gap of
-- more than 5 hours always starts one). is_active: the block's 5 hours
-- have not ended yet.
CREATE VIEW usage_blocks AS
WITH RECURSIVE firsts(first_at) AS (
    SELECT min(timestamp) FROM usage WHERE timestamp IS NOT NULL
    UNION ALL
    SELECT (SELECT min(v.timestamp) FROM usage v
            WHERE v.timestamp > strftime('%Y-%m-%dT%H:00:00.000Z', f.first_at, '+5 hours'))
    FROM firsts f WHERE f.first_at IS NOT NULL
),
blocks AS (
    SELECT first_at, strftime('%Y-%m-%dT%H:00:00.000Z', first_at) AS block_start,
           strftime('%Y-%m-%dT%H:00:00.000Z', first_at, '+5 hours') AS block_end
    FROM firsts WHERE first_at IS NOT NULL
)
SELECT b.block_start, b.block_end,
       b.block_end > strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS is_active,
       min(u.timestamp) AS first_timestamp,
       max(u.timestamp) AS last_timestamp,
       count(DISTINCT u.session_id) AS sessions,
       count(*) AS api_messages,
       sum(coalesce(u.input_tokens, 0)) AS input_tokens,
       sum(coalesce(u.output_tokens, 0)) AS output_tokens,
       sum(coalesce(u.cache_creation_input_tokens, 0)) AS cache_creation_input_tokens,
       sum(coalesce(u.cache_read_input_tokens, 0)) AS cache_read_input_tokens,
       sum(u.billed_tokens) AS total_tokens,
       round(sum(u.cost_usd), 6) AS cost_usd,
       sum(u.cost_usd IS NULL) AS unpriced_messages,
       group_concat(DISTINCT u.model) AS models
FROM blocks b
JOIN billed_cost u ON u.timestamp >= b.first_at AND u.timestamp <= b.block_end
GROUP BY b.block_start
ORDER BY b.block_start DESC;
