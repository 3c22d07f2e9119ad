-- What fills each file's active chain, by content type (text, thinking,
-- tool_use, tool_result, image, attachment, envelope, system_prompt):
-- summed at refresh per file (txdb/catalog/ingest/type_sums.py), read by
-- analyze_by_type and context_by_category, which summed every chain block
-- of the catalog for each page. Filled for the files already catalogued by
-- the migration's Python step.
CREATE TABLE type_sums (
    file_id INTEGER NOT NULL,
    session_id TEXT,
    category TEXT NOT NULL,
    items INTEGER NOT NULL,
    chars INTEGER,
    signature_chars INTEGER,
    tokens INTEGER,
    PRIMARY KEY (file_id, category)
);
CREATE INDEX type_sums_tokens ON type_sums(tokens);

-- The lines a fork copied (records.forked), for billed_usage's ranking of
-- the files that repeat an API message: read from the records rows, that
-- lookup cost twice the ranking itself at 10 copies of the corpus.
CREATE INDEX records_forked ON records(file_id, offset) WHERE forked;

-- The sums above read a file's blocks by (file_id, offset) with their kind
-- and sizes, from the index, not the rows (which hold the text: a refresh
-- of one appended line would read every block of a large file).
DROP INDEX blocks_sizes;
CREATE INDEX blocks_sizes ON blocks(file_id, offset, tokens, kind, chars, signature_chars, session_id);
