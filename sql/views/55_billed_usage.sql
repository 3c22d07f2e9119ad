-- What the API billed: one row per API message. A message id + request id
-- is one API call whichever file repeats it: a forked subagent transcript
-- (agent-acompact-*, agent-aside_question-*) repeats its parent's lines, a
-- fork (txdb fork, Claude Code's /branch, --fork-session) or a copy of a
-- session file repeats them under another sessionId. It counts in one of
-- those files: the one with the largest total, then a session file before
-- a subagent, then a file whose line is not a fork's copy (no
-- forkedFrom), then the first path; so which file was read first never
-- matters. Rows without a message id (message_id 'uuid:...') are never
-- merged. The billed total is usage_context.billed_tokens. session_usage,
-- usage_by_day and usage_by_model read this view.
CREATE VIEW billed_usage AS
SELECT u.*
FROM usage_context u
JOIN files f ON f.id = u.file_id
WHERE u.message_id LIKE 'uuid:%' OR NOT EXISTS (
    SELECT 1 FROM usage_context v JOIN files g ON g.id = v.file_id
    WHERE v.message_id = u.message_id AND v.file_id <> u.file_id AND v.request_id IS u.request_id
      AND ((v.billed_tokens, g.kind = 'session',
            NOT EXISTS (SELECT 1 FROM records r WHERE r.file_id = v.file_id AND r.offset = v.offset
                        AND r.forked))
           > (u.billed_tokens, f.kind = 'session',
              NOT EXISTS (SELECT 1 FROM records r WHERE r.file_id = u.file_id AND r.offset = u.offset
                          AND r.forked))
           OR ((v.billed_tokens, g.kind = 'session',
                NOT EXISTS (SELECT 1 FROM records r WHERE r.file_id = v.file_id AND r.offset = v.offset
                            AND r.forked))
               = (u.billed_tokens, f.kind = 'session',
                  NOT EXISTS (SELECT 1 FROM records r WHERE r.file_id = u.file_id AND r.offset = u.offset
                              AND r.forked))
               AND g.path < f.path))
);
