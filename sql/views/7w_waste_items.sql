-- What a session paid for that it did not need, item by item, in USD, and
-- the txdb command that stops paying for it from the next turn on.
-- Four kinds:
--   large_result:  a tool result of 5,000 tokens or more on the active
--                  chain, re-sent (as a cache read) by every later API turn
--                  (a repeated_read is counted there, not here);
--   repeated_read: a Read result of a file the session read again later:
--                  the older copies, re-sent by every turn after them;
--   reminder:      a superseded attachment (a task reminder and the like)
--                  the default policy drops (attachment_targets.policy_keeps
--                  = 0), re-sent by every later turn;
--   cache_rebuild: an API turn more than 5 minutes after the one before it
--                  (the cache's lifetime), which wrote its context to the
--                  cache again: the write's premium over a read.
-- usd prices each item at the session's model's prices (cache reads, and
-- the 5-minute write premium for rebuilds; prices as billed_cost has them,
-- the newest period). resent_turns counts the API turns of the active
-- chain after the item (each API message once: its last line's position).
-- reclaim is the command that removes the item from what later turns send;
-- its plan (the command without --apply) gives the saving per request.
CREATE VIEW waste_items AS
WITH turns AS (
    SELECT c.file_id, c.pos, u.timestamp, u.model,
           coalesce(u.cache_creation_input_tokens, 0) AS cache_created,
           coalesce(u.cache_read_input_tokens, 0) AS cache_read
    FROM usage u
    JOIN chain c ON c.file_id = u.file_id AND c.offset = u.offset
    WHERE u.in_file = 1
),
session_price AS (
    SELECT s.file_id, s.session_id, s.project, s.title, s.model,
           (SELECT p.cache_read_mtok FROM prices p WHERE p.model = s.model AND p.above_tokens = 0
            ORDER BY p.valid_from DESC LIMIT 1) AS read_mtok,
           (SELECT p.cache_write_5m_mtok - p.cache_read_mtok FROM prices p WHERE p.model = s.model
            AND p.above_tokens = 0 ORDER BY p.valid_from DESC LIMIT 1) AS rebuild_mtok
    FROM session_costs s
),
items AS (
    SELECT 'large_result' AS kind, b.file_id, b.pos, b.line, b.tool_use_id AS item, b.tool_name AS detail,
           b.tokens
    FROM block_targets b
    WHERE b.kind = 'tool_result' AND b.on_chain = 1 AND b.tokens >= 5000
      AND b.tool_use_id NOT IN (SELECT tool_use_id FROM repeated_reads r WHERE r.file_id = b.file_id)
    UNION ALL
    SELECT 'repeated_read', r.file_id, r.pos, r.line, r.tool_use_id, r.file_path, r.tokens
    FROM repeated_reads r
    UNION ALL
    SELECT 'reminder', a.file_id, a.pos, a.line, CAST(a.offset AS TEXT), a.type, a.tokens
    FROM attachment_targets a
    WHERE a.on_chain = 1 AND a.policy_keeps = 0 AND a.tokens > 0
)
SELECT i.kind, i.file_id, sp.session_id, sp.project, sp.title, i.pos, i.line, i.item, i.detail, i.tokens,
       (SELECT count(*) FROM turns t WHERE t.file_id = i.file_id AND t.pos > i.pos) AS resent_turns,
       round(i.tokens * (SELECT count(*) FROM turns t WHERE t.file_id = i.file_id AND t.pos > i.pos)
             * sp.read_mtok / 1e6, 6) AS usd,
       -- by file_id, a number: a session id comes from a file's name and could quote its way out
       CASE i.kind
           WHEN 'large_result' THEN 'txdb persist-tools --where "file_id = ' || i.file_id
                || ' and kind = ''tool_result'' and result_tokens >= 5000"'
           WHEN 'repeated_read' THEN 'txdb persist-tools --where "file_id = ' || i.file_id
                || ' and tool_use_id in (select tool_use_id from repeated_reads where file_id = ' || i.file_id || ')"'
           ELSE 'txdb strip-attachments --where "file_id = ' || i.file_id || ' and policy_keeps = 0"'
       END AS reclaim
FROM items i
JOIN session_price sp ON sp.file_id = i.file_id
UNION ALL
SELECT 'cache_rebuild', t.file_id, sp.session_id, sp.project, sp.title, t.pos, NULL,
       t.timestamp, printf('%.0f min idle', (julianday(t.timestamp) - julianday(t.prev_at)) * 1440),
       t.cache_created, 1,
       round(t.cache_created * sp.rebuild_mtok / 1e6, 6),
       'txdb rescue --where "file_id = ' || t.file_id || '" --target 100000'
FROM (SELECT t.*, lag(t.timestamp) OVER (PARTITION BY t.file_id ORDER BY t.pos) AS prev_at FROM turns t) t
JOIN session_price sp ON sp.file_id = t.file_id
WHERE t.prev_at IS NOT NULL AND julianday(t.timestamp) - julianday(t.prev_at) > 5.0 / 1440
  AND t.cache_created > t.cache_read;
