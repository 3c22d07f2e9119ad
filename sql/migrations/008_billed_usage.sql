-- The API's figures outlive surgery. `usage`'s own columns keep what the API
-- recorded for each message (never lowered: a re-ingested rewrite only
-- raises them, as a streamed message's later lines do); the gauge_* columns
-- hold what the file says now (after a usage reset, the lowered figures
-- Claude Code's gauge reads). in_file = 0: the message is no longer in the
-- file (its offset then names where it was).
ALTER TABLE usage ADD COLUMN gauge_input_tokens INTEGER;
ALTER TABLE usage ADD COLUMN gauge_cache_read_input_tokens INTEGER;
ALTER TABLE usage ADD COLUMN gauge_cache_creation_input_tokens INTEGER;
ALTER TABLE usage ADD COLUMN gauge_iterations TEXT;
ALTER TABLE usage ADD COLUMN in_file INTEGER NOT NULL DEFAULT 1;

UPDATE usage SET gauge_input_tokens = input_tokens,
                 gauge_cache_read_input_tokens = cache_read_input_tokens,
                 gauge_cache_creation_input_tokens = cache_creation_input_tokens,
                 gauge_iterations = iterations;

-- The calibrated context estimate of each session (txdb.estimate), kept by
-- refresh: what `sessions`, the views and the session page show.
ALTER TABLE sessions ADD COLUMN est_context_tokens INTEGER;
ALTER TABLE sessions ADD COLUMN est_method TEXT;
ALTER TABLE sessions ADD COLUMN est_turns INTEGER;

-- Thinking blocks are now sized with their signature and sessions carry the
-- calibrated estimate: the next refresh re-reads every file still on disk
-- once (usage keeps its API figures through it): the re-derive idiom of
-- docs/architecture.md, "Schema changes".
UPDATE files SET inode = NULL WHERE gone = 0;
