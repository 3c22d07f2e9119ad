-- Chain problems, one row each: dangling parents (on the active chain an
-- error, off it a warning), extra roots, tool_results without their
-- tool_use, tool_uses without a result, and timestamps out of order along
-- the chain (a note only: the real CLI writes those). Dangling parents are
-- found at refresh time (table dangling_parents); subagent transcripts
-- hang off their parent session, so there it is a note.
CREATE VIEW chain_health AS
SELECT r.file_id, r.session_id, r.line, r.uuid, 'dangling_parent' AS problem,
       'parent ' || d.parent_uuid || ' is not in the file' AS detail,
       CASE WHEN f.kind = 'subagent' THEN 'note'
            WHEN EXISTS (SELECT 1 FROM chain c WHERE c.file_id = d.file_id AND c.offset = d.offset)
            THEN 'error' ELSE 'warning' END AS severity
FROM dangling_parents d
JOIN records r ON r.file_id = d.file_id AND r.offset = d.offset
JOIN files f ON f.id = d.file_id
UNION ALL
SELECT r.file_id, r.session_id, r.line, r.uuid, 'extra_root',
       r.type || coalesce('/' || r.subtype, '') || ' has no parent', 'note'
FROM records r
WHERE r.uuid IS NOT NULL AND r.parent_uuid IS NULL
  AND r.type IN ('user', 'assistant', 'attachment', 'system')
  AND coalesce(r.subtype, '') <> 'compact_boundary'
  AND EXISTS (SELECT 1 FROM records e WHERE e.file_id = r.file_id AND e.uuid IS NOT NULL
              AND e.parent_uuid IS NULL AND e.offset < r.offset
              AND e.type IN ('user', 'assistant', 'attachment', 'system'))
UNION ALL
SELECT b.file_id, b.session_id, r.line, r.uuid, 'orphan_tool_result',
       'tool_result ' || coalesce(b.tool_use_id, '?') || ' has no tool_use on the chain', 'error'
FROM blocks b
JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset
JOIN records r ON r.file_id = b.file_id AND r.offset = b.offset
WHERE b.kind = 'tool_result'
  AND NOT EXISTS (SELECT 1 FROM blocks u JOIN chain cu ON cu.file_id = u.file_id AND cu.offset = u.offset
                  WHERE u.file_id = b.file_id AND u.tool_use_id = b.tool_use_id AND u.kind = 'tool_use')
UNION ALL
SELECT b.file_id, b.session_id, r.line, r.uuid, 'tool_use_without_result',
       'tool_use ' || coalesce(b.tool_use_id, '?') || ' (' || coalesce(b.tool_name, '?') || ') has no tool_result on the chain',
       CASE WHEN c.pos >= (SELECT chain_length - 2 FROM sessions m WHERE m.file_id = b.file_id) THEN 'note' ELSE 'warning' END
FROM blocks b
JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset
JOIN records r ON r.file_id = b.file_id AND r.offset = b.offset
WHERE b.kind = 'tool_use'
  AND NOT EXISTS (SELECT 1 FROM blocks t JOIN chain ct ON ct.file_id = t.file_id AND ct.offset = t.offset
                  WHERE t.file_id = b.file_id AND t.tool_use_id = b.tool_use_id AND t.kind = 'tool_result')
UNION ALL
SELECT cur.file_id, cur.session_id, cur.line, cur.uuid, 'timestamp_out_of_order',
       cur.timestamp || ' is before its chain predecessor ' || prev.timestamp, 'note'
FROM active_chain cur
JOIN active_chain prev ON prev.file_id = cur.file_id AND prev.pos = cur.pos - 1
WHERE cur.timestamp IS NOT NULL AND prev.timestamp IS NOT NULL AND cur.timestamp < prev.timestamp;
