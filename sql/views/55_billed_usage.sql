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
-- (Ranked in one window per message, not compared pair by pair: at 10
-- copies of a catalog the pairwise form took seconds. A fork's copied
-- line is looked up in the partial index records_forked, migration 039:
-- the records row itself cost 2x the window at 10 copies.)
CREATE VIEW billed_usage AS
SELECT u.*
FROM usage_context u
JOIN (
    SELECT v.file_id, v.message_id,
           row_number() OVER (
               PARTITION BY v.message_id, v.request_id
               ORDER BY v.billed_tokens DESC, g.kind = 'session' DESC,
                        NOT EXISTS (SELECT 1 FROM records r INDEXED BY records_forked
                                    WHERE r.file_id = v.file_id AND r.offset = v.offset AND r.forked) DESC,
                        g.path) AS rank_in_message
    FROM usage_context v
    JOIN files g ON g.id = v.file_id
) k ON k.file_id = u.file_id AND k.message_id = u.message_id
-- (tested on k's own columns: a row ranked out is dropped before its usage row is read)
WHERE k.message_id LIKE 'uuid:%' OR k.rank_in_message = 1;
