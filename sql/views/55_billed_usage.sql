-- What the API billed: one row per API message. A message repeated in
-- several files of one session (a forked subagent transcript such as
-- agent-acompact-* or agent-aside_question-* repeats its parent's lines,
-- message id, request id and sessionId included) counts in one of them:
-- the one with the largest total, then a session file before a subagent,
-- then the first path; so which file was read first never matters. Rows
-- without a message id (message_id 'uuid:...') are never merged.
-- session_usage, usage_by_day and usage_by_model read this view.
CREATE VIEW billed_usage AS
SELECT u.*
FROM usage u
JOIN files f ON f.id = u.file_id
WHERE u.message_id LIKE 'uuid:%' OR NOT EXISTS (
    SELECT 1 FROM usage v JOIN files g ON g.id = v.file_id
    WHERE v.message_id = u.message_id AND v.file_id <> u.file_id
      AND v.session_id IS u.session_id AND v.request_id IS u.request_id
      AND ((coalesce(v.input_tokens, 0) + coalesce(v.output_tokens, 0)
              + coalesce(v.cache_read_input_tokens, 0) + coalesce(v.cache_creation_input_tokens, 0),
            g.kind = 'session')
           > (coalesce(u.input_tokens, 0) + coalesce(u.output_tokens, 0)
              + coalesce(u.cache_read_input_tokens, 0) + coalesce(u.cache_creation_input_tokens, 0),
              f.kind = 'session')
           OR ((coalesce(v.input_tokens, 0) + coalesce(v.output_tokens, 0)
                  + coalesce(v.cache_read_input_tokens, 0) + coalesce(v.cache_creation_input_tokens, 0),
                g.kind = 'session')
               = (coalesce(u.input_tokens, 0) + coalesce(u.output_tokens, 0)
                  + coalesce(u.cache_read_input_tokens, 0) + coalesce(u.cache_creation_input_tokens, 0),
                  f.kind = 'session')
               AND g.path < f.path))
);
