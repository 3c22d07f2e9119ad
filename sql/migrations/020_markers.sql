-- The persisted markers of each file (a block whose text starts with
-- `<persisted-`, txdb's or Claude Code's own `<persisted-output>`), found
-- by refresh, with what the view would otherwise read out of the record's
-- raw line: toolUseResult.persistedOutputSize (an integer, else NULL). The
-- persisted view reads these rows instead of scanning every block's text
-- and extracting from raw JSON. Refresh deletes a file's rows with its
-- blocks; the files already catalogued are read again once to fill it.
CREATE TABLE markers (
    file_id INTEGER NOT NULL REFERENCES files(id),
    offset INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    recorded_size INTEGER,            -- toolUseResult.persistedOutputSize as the line recorded it
    PRIMARY KEY (file_id, offset, idx)
);

UPDATE files SET inode = NULL WHERE gone = 0 AND id IN (
    SELECT DISTINCT file_id FROM blocks
    WHERE kind IN ('text', 'tool_result') AND ltrim(text, ' ' || char(9, 10, 13)) LIKE '<persisted-%');
