-- Secrets found in the blocks' text (txdb.secrets, detect-secrets'
-- plugins), kept by refresh for the blocks it writes: where each one is
-- and of what type, and a hash of it; never the secret itself. The
-- secrets view reads these rows; `txdb export --redact` masks them.
CREATE TABLE secret_findings (
    file_id INTEGER NOT NULL REFERENCES files(id),
    offset INTEGER NOT NULL,          -- the block's record
    idx INTEGER NOT NULL,             -- the block
    start INTEGER NOT NULL,           -- where the secret starts in blocks.text, in characters
    length INTEGER NOT NULL,          -- its length, in characters
    line INTEGER NOT NULL,            -- its line in the block's text, from 1
    col INTEGER NOT NULL,             -- its column in that line, from 0
    type TEXT NOT NULL,               -- detect-secrets' secret type (AWS Access Key, Secret Keyword, ...)
    secret_sha256 TEXT NOT NULL,      -- sha256 of the secret, hex: the same secret in two places
    PRIMARY KEY (file_id, offset, idx, start)
);

-- Scanned on the next refresh: every file is re-read (the re-derive idiom
-- of docs/architecture.md, "Schema changes").
UPDATE files SET inode = NULL WHERE gone = 0;
