-- Attachments on each session's active chain by type, with what the
-- default strip-attachments policy would keep (every keep-all, system-prompt,
-- unknown and free one, and the newest of each superseded type) and drop.
CREATE VIEW attachments_by_type AS
SELECT a.file_id, a.session_id, a.type, a.policy,
       count(*) AS count,
       sum(a.tokens) AS tokens,
       sum(keeps) AS kept,
       count(*) - sum(keeps) AS dropped,
       sum(CASE WHEN keeps = 0 THEN a.tokens ELSE 0 END) AS dropped_tokens,
       sum(a.free) AS free
FROM (
    SELECT a.*,
           CASE WHEN a.policy <> 'superseded' OR a.free = 1
                  OR a.offset = (SELECT max(m.offset) FROM attachments m
                                 WHERE m.file_id = a.file_id AND m.type = a.type)
                THEN 1 ELSE 0 END AS keeps
    FROM attachments a
    JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset
) a
GROUP BY a.file_id, a.type;
