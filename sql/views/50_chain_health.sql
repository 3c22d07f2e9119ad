-- Chain problems, one row each: missing parents, extra roots, tool_results
-- without their tool_use, tool_uses without a result, and timestamps out of
-- order along the chain (a note only: the real CLI writes those). Missing
-- parents are judged at refresh by `txdb verify`'s own rule
-- (verify.missing_parent_findings, kept in chain_findings): a gap resume
-- bridges is a warning (bridged_parent), one that cuts user/assistant lines
-- off the chain it sends an error (cut_off_messages); in a subagent
-- transcript a note. Written to read each chain row once: this view spans
-- the whole catalog.
CREATE VIEW chain_health AS
SELECT r.file_id, r.session_id, r.line, r.uuid, cf.code AS problem, cf.detail, cf.severity
FROM chain_findings cf
JOIN records r ON r.file_id = cf.file_id AND r.offset = cf.offset
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
-- verify's pairing rule (verify.py: "tool_use / tool_result pairing"): an
-- unanswered call is a note in the last two chain positions (the turn may
-- still be running), an error before (resume drops it); the result of a
-- call the chain lacks, or that comes before it, an error.
SELECT t.file_id, r.session_id, r.line, r.uuid,
       CASE WHEN t.uses = 0 THEN 'orphan_tool_result'
            WHEN t.results = 0 THEN 'tool_use_without_result'
            ELSE 'tool_result_before_use' END,
       CASE WHEN t.uses = 0
            THEN 'tool_result ' || coalesce(t.tool_use_id, '?') || ' has no tool_use on the chain'
            WHEN t.results = 0
            THEN 'tool_use ' || coalesce(t.tool_use_id, '?') || ' (' || coalesce(t.tool_name, '?')
                 || ') has no tool_result on the chain'
            ELSE 'tool_result for ' || coalesce(t.tool_use_id, '?') || ' comes before its tool_use' END,
       CASE WHEN t.uses = 0 THEN 'error'
            WHEN t.results > 0 THEN 'error'
            WHEN t.use_pos >= s.chain_length - 2 THEN 'note'
            ELSE 'error' END
FROM (
    -- tool_use / tool_result blocks on the active chain, paired by id
    SELECT b.file_id, b.tool_use_id,
           sum(b.kind = 'tool_use') AS uses,
           sum(b.kind = 'tool_result') AS results,
           max(CASE WHEN b.kind = 'tool_use' THEN c.pos END) AS use_pos,
           max(CASE WHEN b.kind = 'tool_result' THEN c.pos END) AS result_pos,
           max(b.tool_name) AS tool_name
    -- (from the partial covering index of the two kinds in (file, id)
    -- order, migration 042: grouped in one pass, and the block rows hold the text)
    FROM blocks b INDEXED BY blocks_tool_pairs
    CROSS JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset
    WHERE b.kind IN ('tool_use', 'tool_result')
    GROUP BY b.file_id, b.tool_use_id
) t
JOIN sessions s ON s.file_id = t.file_id
JOIN chain c ON c.file_id = t.file_id AND c.pos = CASE WHEN t.uses = 0 OR t.results > 0 THEN t.result_pos
                                                       ELSE t.use_pos END
JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
WHERE t.uses = 0 OR t.results = 0 OR t.result_pos < t.use_pos
UNION ALL
SELECT r.file_id, r.session_id, r.line, r.uuid, 'timestamp_out_of_order',
       c.timestamp || ' is before its chain predecessor ' || p.timestamp, 'note'
FROM chain c
CROSS JOIN chain p ON p.file_id = c.file_id AND p.pos = c.pos - 1
CROSS JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
WHERE c.timestamp < p.timestamp;
