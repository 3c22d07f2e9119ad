-- Attachments on each session's active chain by type, with what the
-- default strip-attachments policy would keep (every keep-all, system-prompt,
-- unknown and free one, and the newest of each superseded type) and drop:
-- attachment_targets.policy_keeps, the policy's one SQL statement.
CREATE VIEW attachments_by_type AS
SELECT t.file_id, t.session_id, t.type, t.policy,
       count(*) AS count,
       sum(t.tokens) AS tokens,
       sum(t.policy_keeps) AS kept,
       count(*) - sum(t.policy_keeps) AS dropped,
       sum(CASE WHEN t.policy_keeps = 0 THEN t.tokens ELSE 0 END) AS dropped_tokens,
       sum(t.free) AS free
FROM attachment_targets t
WHERE t.on_chain = 1
GROUP BY t.file_id, t.type;
