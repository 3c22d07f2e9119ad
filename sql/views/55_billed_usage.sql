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
-- (The rank is kept by refresh in usage.billed, migration 042,
-- txdb/catalog/ingest/billed.py: ranking every row in a window for each
-- page cost most of a second at 10 copies of the corpus.)
CREATE VIEW billed_usage AS
SELECT u.*
FROM usage_context u
WHERE u.billed;
