-- Each API message's final figures. A file as the API wrote it holds a
-- message's figures on its last line (a streamed message's earlier lines
-- carry partial counts, sometimes larger ones: an input estimate before the
-- real count). rewritten = 1: the row outlived a rewrite of its file (a
-- surgery, a usage reset), so its API figures only ever rise from then on,
-- whatever the file says. rewritten = 2: made before this migration by the
-- first-line rule; the next read of its file (forced below) takes the last
-- line and sets it to 0. Rows of files a surgery rewrote keep their figures.
ALTER TABLE usage ADD COLUMN rewritten INTEGER NOT NULL DEFAULT 0;
UPDATE usage SET rewritten = CASE
    WHEN in_file = 0 OR file_id IN (SELECT file_id FROM surgeries WHERE file_id IS NOT NULL) THEN 1
    ELSE 2 END;
UPDATE files SET inode = NULL WHERE gone = 0;

-- One API message repeated in several files of a session (a forked
-- subagent transcript repeats its parent's lines) is counted once, by the
-- billed_usage view, which looks rows up by message id.
CREATE INDEX IF NOT EXISTS usage_message ON usage(message_id);
