-- waste_items summed per session and kind: what each session paid for
-- that it did not need, most first, and the command that reclaims it.
CREATE VIEW waste AS
SELECT session_id, project, title, kind, count(*) AS items, sum(tokens) AS tokens,
       round(sum(usd), 6) AS usd, min(reclaim) AS reclaim, file_id
FROM waste_items
GROUP BY file_id, kind
ORDER BY usd DESC;
