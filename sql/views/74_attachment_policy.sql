-- Attachments on the active chains of all sessions by type: how many, what
-- they cost, and what the default strip-attachments policy would drop
-- (older copies of superseded types; free types render to nothing).
CREATE VIEW attachment_policy AS
SELECT
    type,
    policy,
    count(DISTINCT file_id) AS sessions,
    sum(count) AS attachments,
    sum(tokens) AS tokens,
    sum(kept) AS kept,
    sum(dropped) AS dropped,
    sum(dropped_tokens) AS dropped_tokens,
    sum(free) AS free
FROM attachments_by_type
GROUP BY type, policy
ORDER BY dropped_tokens DESC, tokens DESC;
