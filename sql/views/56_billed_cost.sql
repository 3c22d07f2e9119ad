-- What each API message cost (billed_usage: each message once), in USD:
-- its stored tokens times the prices table (txdb.cost fills it from the
-- price library), at the prices in force on the message's day and in its
-- long-context tier (the tier whose above_tokens its input, cached or not,
-- exceeds). Cache writes are 5-minute ones except the 1-hour part
-- (ephemeral_1h_input_tokens). cost_usd is NULL for a model the library
-- does not price (priced_as NULL), never 0, and for a row with an invalid
-- count (usage.invalid: a negative, an out-of-range number, a float or a
-- string, stored as NULL), which is never priced; a message with no tokens
-- costs 0.
-- usage_by_day, usage_by_model, session_usage, session_costs and
-- usage_blocks read this view.
CREATE VIEW billed_cost AS
-- Each price row with the next tier's threshold, computed once per model
-- and period, not looked up again for every message.
WITH tiers AS (
    SELECT p.*, lead(p.above_tokens) OVER (PARTITION BY p.model, p.valid_from ORDER BY p.above_tokens) AS next_above
    FROM prices p
)
SELECT u.*, p.priced_as,
       CASE
           WHEN u.invalid IS NOT NULL THEN NULL
           WHEN u.billed_tokens = 0 THEN 0.0
           WHEN p.priced_as IS NULL THEN NULL
           ELSE (coalesce(u.input_tokens, 0) * p.input_mtok
                 + coalesce(u.output_tokens, 0) * p.output_mtok
                 + coalesce(u.cache_read_input_tokens, 0) * p.cache_read_mtok
                 + (coalesce(u.cache_creation_input_tokens, 0)
                    - min(coalesce(u.ephemeral_1h_input_tokens, 0), coalesce(u.cache_creation_input_tokens, 0)))
                   * p.cache_write_5m_mtok
                 + min(coalesce(u.ephemeral_1h_input_tokens, 0), coalesce(u.cache_creation_input_tokens, 0))
                   * p.cache_write_1h_mtok) / 1e6
       END AS cost_usd
FROM billed_usage u
LEFT JOIN tiers p ON p.model = u.model
    AND p.valid_from <= coalesce(u.timestamp, '9999')
    AND (p.valid_until IS NULL OR coalesce(u.timestamp, '9999') < p.valid_until)
    -- the highest tier whose threshold the input exceeds: no higher one is below it
    AND (p.above_tokens = 0 OR p.above_tokens < coalesce(u.input_tokens, 0) + coalesce(u.cache_read_input_tokens, 0)
                                                + coalesce(u.cache_creation_input_tokens, 0))
    AND (p.next_above IS NULL OR p.next_above >= coalesce(u.input_tokens, 0) + coalesce(u.cache_read_input_tokens, 0)
                                                 + coalesce(u.cache_creation_input_tokens, 0));
