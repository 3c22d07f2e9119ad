-- The estimate follows the content (estimate.calibrate: only the recorded
-- turns whose figures describe the file now calibrate, the fit bounded,
-- read from the file's own usage figures rather than the surgeries log):
-- every session's stored estimate is computed again from the catalog by
-- the open that runs this migration. A read_truncation_notice line now
-- costs what the CLI stops sending without it (policy.attachment_cost: the
-- banner less the short notice the CLI sends in its place), so the files
-- holding one are read again.
UPDATE files SET inode = NULL WHERE gone = 0 AND id IN (
    SELECT DISTINCT file_id FROM attachments WHERE type = 'read_truncation_notice');
CREATE TABLE IF NOT EXISTS _txdb_meta (key TEXT PRIMARY KEY, value TEXT);
INSERT OR REPLACE INTO _txdb_meta (key, value) VALUES ('rederive_estimates', '033');
