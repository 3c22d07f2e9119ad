-- Secrets found in the catalog's text (each block's, and the strings of an
-- attachment line's `attachment`) by `txdb secrets scan` (txdb.secrets,
-- detect-secrets' plugins): where each one is and of what type, and a
-- hash of it; never the secret itself. The secrets view reads these rows;
-- `txdb export --redact` masks them. Refresh deletes a file's rows with
-- its blocks (a rewritten file is scanned again whole).
CREATE TABLE secret_findings (
    file_id INTEGER NOT NULL REFERENCES files(id),
    offset INTEGER NOT NULL,          -- the block's record
    idx INTEGER NOT NULL,             -- the block; -1: the record's attachment
    field TEXT NOT NULL DEFAULT '',   -- in an attachment: the string's JSON path ($.content.file.content)
    start INTEGER NOT NULL,           -- where the secret starts in the text, in characters
    length INTEGER NOT NULL,          -- its length, in characters
    line INTEGER NOT NULL,            -- its line in the block's text, from 1
    col INTEGER NOT NULL,             -- its column in that line, from 0
    type TEXT NOT NULL,               -- detect-secrets' secret type (AWS Access Key, Secret Keyword, ...)
    secret_sha256 TEXT NOT NULL,      -- sha256 of the secret, hex: the same secret in two places
    PRIMARY KEY (file_id, offset, idx, field, start)
);

-- How far each file's text was scanned: every block and attachment of a record before
-- this byte offset (the file's refresh cursor at the scan). The next scan
-- reads the blocks from there on, so only new text is scanned.
CREATE TABLE secret_scans (
    file_id INTEGER PRIMARY KEY REFERENCES files(id),
    scanned_to INTEGER NOT NULL,
    scanned_at TEXT NOT NULL
);
