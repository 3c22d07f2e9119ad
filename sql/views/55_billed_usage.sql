-- What the API billed: one row per API message. A message repeated in
-- several files of one session (a forked subagent transcript such as
-- agent-acompact-* or agent-aside_question-* repeats its parent's lines,
-- message id, request id and sessionId included) counts in one of them:
-- the one with the largest total, then a session file before a subagent,
-- then the first path; so which file was read first never matters. Rows
-- without a message id (message_id 'uuid:...') are never merged.
-- The billed total is usage_context.billed_tokens. session_usage,
-- usage_by_day and usage_by_model read this view.
CREATE VIEW billed_usage AS
SELECT u.*
FROM usage_context u
JOIN files f ON f.id = u.file_id
WHERE u.message_id LIKE 'uuid:%' OR NOT EXISTS (
    SELECT 1 FROM usage_context v JOIN files g ON g.id = v.file_id
    WHERE v.message_id = u.message_id AND v.file_id <> u.file_id
      AND v.session_id IS u.session_id AND v.request_id IS u.request_id
      AND ((v.billed_tokens, g.kind = 'session')
           > (u.billed_tokens, f.kind = 'session')
           OR ((v.billed_tokens, g.kind = 'session')
               = (u.billed_tokens, f.kind = 'session')
               AND g.path < f.path))
);
