-- Read results of a file the same session read again later on its active
-- chain: every copy but the newest (the model has the newest; the older
-- ones are re-sent by every turn). One row per older result; a --where
-- over block_targets can name them: tool_use_id in (select tool_use_id
-- from repeated_reads where ...). waste_items prices them.
CREATE VIEW repeated_reads AS
SELECT r.file_id, r.session_id, r.pos, r.line, r.tool_use_id, r.file_path, r.tokens, r.later_reads
FROM (
    SELECT res.file_id, res.session_id, res.pos, res.line, res.tool_use_id, res.tokens,
           json_extract(u.text, '$.file_path') AS file_path,
           count(*) OVER (PARTITION BY res.file_id, json_extract(u.text, '$.file_path')
                          ORDER BY res.pos DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS later_reads
    FROM block_targets res
    JOIN blocks u ON u.file_id = res.file_id AND u.tool_use_id = res.tool_use_id AND u.kind = 'tool_use'
    WHERE res.kind = 'tool_result' AND res.tool_name = 'Read' AND res.on_chain = 1 AND res.is_error = 0
      AND json_valid(u.text)
) r
WHERE r.later_reads > 0 AND r.file_path IS NOT NULL;
