-- A human prompt (records.human_prompt, held to it by tests/test_title_rule.py):
-- a user record, not meta or a compaction summary, whose first text block
-- of typed text (not empty, not opening with markup "<"; a string content
-- is one text block) comes after markup-only or empty text blocks alone
-- (an <ide_opened_file> note, a slash command, a caveat). One row per
-- prompt, on or off the chain. analyze's cut points read it.
CREATE VIEW human_prompts AS
SELECT r.file_id, r.offset, r.line, r.timestamp, b.text
FROM records r
JOIN blocks b ON b.file_id = r.file_id AND b.offset = r.offset
WHERE r.type = 'user' AND coalesce(r.is_meta, 0) = 0
  AND r.compact_summary IS NOT 1
  AND b.kind = 'text'
  AND trim(b.text, ' ' || char(9, 10, 11, 12, 13)) <> ''
  AND substr(ltrim(b.text, ' ' || char(9, 10, 11, 12, 13)), 1, 1) <> '<'
  AND b.idx = (SELECT count(*) FROM blocks e
               WHERE e.file_id = b.file_id AND e.offset = b.offset AND e.idx < b.idx AND e.type = 'text'
                 AND (trim(coalesce(e.text, ''), ' ' || char(9, 10, 11, 12, 13)) = ''
                      OR substr(ltrim(e.text, ' ' || char(9, 10, 11, 12, 13)), 1, 1) = '<'));
