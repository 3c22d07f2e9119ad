-- The CLI's own figure: the last `cost-state` line of each session file
-- (Claude Code writes one as it exits a turn). totalCostUSD is the
-- running total of the CLI process, carried over on --resume (startTime
-- stays the first run's), and counts every API request the CLI made,
-- those the transcript does not hold too; modelUsage gives it per model.
-- txdb cost --by session shows it beside the cost txdb computes.
CREATE VIEW cli_cost AS
SELECT r.file_id, r.session_id, r.line,
       json_extract(r.json, '$.totalCostUSD') AS cli_cost_usd,
       json_extract(r.json, '$.hasUnknownModelCost') AS has_unknown_model_cost,
       json_extract(r.json, '$.modelUsage') AS model_usage
FROM records r
WHERE r.type = 'cost-state'
  AND r.offset = (SELECT max(q.offset) FROM records q WHERE q.file_id = r.file_id AND q.type = 'cost-state');
