-- Chain problems, one row each: dangling parents (on the active chain an
-- error, off it a warning), extra roots, tool_results without their
-- tool_use, tool_uses without a result, and timestamps out of order along
-- the chain (a note only: the real CLI writes those). Dangling parents are
-- found at refresh time (table dangling_parents); subagent transcripts
-- hang off their parent session, so there it is a note. Written to read
-- each chain row once: this view spans the whole catalog.
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
-- (+r.type: the roots index drives this, never the type index)
SELECT r.file_id, r.session_id, r.line, r.uuid, 'extra_root',
       r.type || coalesce('/' || r.subtype, '') || ' has no parent', 'note'
FROM records r
WHERE r.uuid IS NOT NULL AND r.parent_uuid IS NULL
  AND +r.type IN ('user', 'assistant', 'attachment', 'system')
  AND coalesce(r.subtype, '') <> 'compact_boundary'
  AND EXISTS (SELECT 1 FROM records e WHERE e.file_id = r.file_id AND e.uuid IS NOT NULL
              AND e.parent_uuid IS NULL AND e.offset < r.offset
              AND +e.type IN ('user', 'assistant', 'attachment', 'system'))
UNION ALL
SELECT t.file_id, r.session_id, r.line, r.uuid,
       CASE WHEN t.uses = 0 THEN 'orphan_tool_result' ELSE 'tool_use_without_result' END,
       CASE WHEN t.uses = 0
            THEN 'tool_result ' || coalesce(t.tool_use_id, '?') || ' has no tool_use on the chain'
            ELSE 'tool_use ' || coalesce(t.tool_use_id, '?') || ' (' || coalesce(t.tool_name, '?')
                 || ') has no tool_result on the chain' END,
       CASE WHEN t.uses = 0 THEN 'error'
            WHEN t.use_pos >= s.chain_length - 2 THEN 'note'
            ELSE 'warning' END
FROM (
    -- tool_use / tool_result blocks on the active chain, paired by id
    SELECT b.file_id, b.tool_use_id,
           sum(b.kind = 'tool_use') AS uses,
           sum(b.kind = 'tool_result') AS results,
           min(CASE WHEN b.kind = 'tool_use' THEN c.pos END) AS use_pos,
           min(CASE WHEN b.kind = 'tool_result' THEN c.pos END) AS result_pos,
           max(b.tool_name) AS tool_name
    FROM chain c
    CROSS JOIN blocks b ON b.file_id = c.file_id AND b.offset = c.offset
    WHERE b.kind IN ('tool_use', 'tool_result')
    GROUP BY b.file_id, b.tool_use_id
) t
JOIN sessions s ON s.file_id = t.file_id
JOIN chain c ON c.file_id = t.file_id AND c.pos = coalesce(t.result_pos, t.use_pos)
JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
WHERE t.uses = 0 OR t.results = 0
UNION ALL
SELECT r.file_id, r.session_id, r.line, r.uuid, 'timestamp_out_of_order',
       c.timestamp || ' is before its chain predecessor ' || p.timestamp, 'note'
FROM chain c
CROSS JOIN chain p ON p.file_id = c.file_id AND p.pos = c.pos - 1
CROSS JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
WHERE c.timestamp < p.timestamp;
