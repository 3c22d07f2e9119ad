-- What `txdb verify` says about a file's missing parents, kept by refresh
-- (txdb.verify.store_chain_findings, for the files dangling_parents names):
-- a gap resume bridges is a warning, one that cuts messages off the chain
-- it sends is an error. chain_health reads these rows, so the views,
-- `analyze` and `verify` judge a missing parent by one rule.
CREATE TABLE chain_findings (
    file_id INTEGER NOT NULL REFERENCES files(id),
    offset INTEGER NOT NULL,          -- the record the finding is about
    severity TEXT NOT NULL,           -- error, warning, note
    code TEXT NOT NULL,               -- verify's code (cut_off_messages, bridged_parent, ...)
    detail TEXT NOT NULL,
    PRIMARY KEY (file_id, offset, code)
);

-- Judged on the next refresh: the files with a missing parent are re-read
-- (the re-derive idiom of docs/architecture.md, "Schema changes").
UPDATE files SET inode = NULL WHERE gone = 0 AND id IN (SELECT file_id FROM dangling_parents);
