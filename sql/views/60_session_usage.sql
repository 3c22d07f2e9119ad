-- API usage per session file, one count per API message (billed_usage: lines that repeat
-- a message.id count once, in one file of the session), and its cost in USD
-- (billed_cost; unpriced_messages: messages of a model the price library
-- does not know, left out of cost_usd).
CREATE VIEW session_usage AS
SELECT u.file_id, s.session_id, s.project,
       count(*) AS api_messages,
       sum(coalesce(u.input_tokens, 0)) AS input_tokens,
       sum(coalesce(u.output_tokens, 0)) AS output_tokens,
       sum(coalesce(u.cache_creation_input_tokens, 0)) AS cache_creation_input_tokens,
       sum(coalesce(u.cache_read_input_tokens, 0)) AS cache_read_input_tokens,
       sum(u.billed_tokens) AS total_tokens,
       min(u.timestamp) AS first_timestamp,
       max(u.timestamp) AS last_timestamp,
       group_concat(DISTINCT u.model) AS models,
       round(sum(u.cost_usd), 6) AS cost_usd,
       sum(u.cost_usd IS NULL) AS unpriced_messages
FROM billed_cost u
JOIN sessions s ON s.file_id = u.file_id
GROUP BY u.file_id;
