-- Every record with its estimated context tokens, its size on disk, and
-- whether the active chain sends it. Journal and off-chain lines cost
-- bytes on disk, never context.
CREATE VIEW record_costs AS
SELECT
    r.file_id,
    r.session_id,
    r.line,
    r.offset,
    r.type,
    r.subtype,
    r.uuid,
    r.timestamp,
    c.pos,
    CASE WHEN c.pos IS NOT NULL THEN 1 ELSE 0 END AS on_chain,
    CASE WHEN r.type IN (SELECT name FROM known_formats WHERE kind = 'line' AND class = 'journal')
         THEN 1 ELSE 0 END AS journal,
    r.length AS bytes,
    CASE WHEN c.pos IS NOT NULL THEN r.tokens ELSE 0 END AS context_tokens,
    r.tokens
FROM records r
LEFT JOIN chain c ON c.file_id = r.file_id AND c.offset = r.offset;
