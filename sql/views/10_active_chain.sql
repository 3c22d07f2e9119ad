-- The active chain of every session file: what Claude Code walks back from
-- the leaf on --resume, root at pos 0. Positions are the ones surgery
-- commands take as --from/--to/--pos.
CREATE VIEW active_chain AS
SELECT
    c.file_id,
    r.session_id,
    c.pos,
    r.line,
    r.offset,
    r.type,
    r.subtype,
    r.role,
    r.uuid,
    r.parent_uuid,
    r.timestamp,
    r.is_sidechain,
    r.is_meta,
    r.tokens
FROM chain c
JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset;
