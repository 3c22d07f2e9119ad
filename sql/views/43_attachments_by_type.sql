-- Attachments on each session's active chain by type, with what the
-- default strip-attachments policy would keep and drop.
CREATE VIEW attachments_by_type AS
SELECT file_id, session_id, type, policy,
       count(*) AS count,
       sum(tokens) AS tokens,
       sum(policy_keeps) AS kept,
       count(*) - sum(policy_keeps) AS dropped,
       sum(CASE WHEN policy_keeps = 0 THEN tokens ELSE 0 END) AS dropped_tokens,
       sum(free) AS free
FROM attachment_targets
WHERE on_chain = 1
GROUP BY file_id, type;
