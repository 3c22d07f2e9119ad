-- API usage per model over the whole catalog, one count per API message (billed_usage),
-- with its cost in USD (billed_cost; unpriced_messages are left out of it).
CREATE VIEW usage_by_model AS
SELECT
    coalesce(u.model, '(none)') AS model,
    count(DISTINCT u.file_id) AS sessions,
    count(*) AS api_messages,
    sum(coalesce(u.input_tokens, 0)) AS input_tokens,
    sum(coalesce(u.output_tokens, 0)) AS output_tokens,
    sum(coalesce(u.cache_creation_input_tokens, 0)) AS cache_creation_input_tokens,
    sum(coalesce(u.cache_read_input_tokens, 0)) AS cache_read_input_tokens,
    sum(u.billed_tokens) AS total_tokens,
    min(substr(u.timestamp, 1, 10)) AS first_day,
    max(substr(u.timestamp, 1, 10)) AS last_day,
    round(sum(u.cost_usd), 6) AS cost_usd,
    sum(u.cost_usd IS NULL) AS unpriced_messages
FROM billed_cost u
GROUP BY coalesce(u.model, '(none)')
ORDER BY total_tokens DESC;
