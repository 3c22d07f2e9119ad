-- A human prompt (records.human_prompt, held to it by tests/test_rules.py):
-- a user record, not meta or a compaction summary, whose first block is
-- text (a string content is one text block; slash commands, caveats and
-- command output are blocks of their own kinds) that is not empty and does
-- not open with markup ("<"). One row per prompt, on or off the chain.
-- analyze's cut points read it.
CREATE VIEW human_prompts AS
SELECT r.file_id, r.offset, r.line, r.timestamp, b.text
FROM records r
JOIN blocks b ON b.file_id = r.file_id AND b.offset = r.offset AND b.idx = 0
WHERE r.type = 'user' AND coalesce(r.is_meta, 0) = 0
  AND json_extract(r.raw, '$.isCompactSummary') IS NOT 1
  AND b.kind = 'text'
  AND trim(b.text, ' ' || char(9, 10, 11, 12, 13)) <> ''
  AND substr(ltrim(b.text, ' ' || char(9, 10, 11, 12, 13)), 1, 1) <> '<';
