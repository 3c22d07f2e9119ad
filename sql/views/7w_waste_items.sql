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
-- chain after the item (each API message once: its last line's position);
-- paid_turns those of them whose API message counts in this file, by the
-- rule cost counts each message once by (billed_usage: a message id +
-- request id is one API call whichever file repeats it). usd is priced by
-- paid_turns, so a fork, a resumed copy or a restore --to copy adds no
-- dollars for the turns another file holds (its items stay, at $0 until its
-- own turns re-send them), and a rebuild is listed only in the file its
-- turn counts in: waste and txdb waste, per session, project or kind, sum
-- each API turn's waste once.
-- reclaim is the command that removes the item from what later turns send;
-- its plan (the command without --apply) gives the saving per request.
-- The items are found at refresh, per file (waste_found, migration 043:
-- txdb/catalog/ingest/waste_found.py holds the rules' SQL); this view
-- prices them, so a new price reaches them without a refresh.
CREATE VIEW waste_items AS
WITH session_price AS (
    SELECT s.file_id, s.session_id, s.project, s.title, s.model,
           (SELECT p.cache_read_mtok FROM prices p WHERE p.model = s.model AND p.above_tokens = 0
            ORDER BY p.valid_from DESC LIMIT 1) AS read_mtok,
           (SELECT p.cache_write_5m_mtok - p.cache_read_mtok FROM prices p WHERE p.model = s.model
            AND p.above_tokens = 0 ORDER BY p.valid_from DESC LIMIT 1) AS rebuild_mtok
    FROM sessions s
    JOIN files f ON f.id = s.file_id
)
SELECT w.kind, w.file_id, sp.session_id, sp.project, sp.title, w.pos, w.line, w.item, w.detail, w.tokens,
       w.resent_turns, w.paid_turns,
       CASE w.kind
           WHEN 'cache_rebuild' THEN round(w.tokens * sp.rebuild_mtok / 1e6, 6)
           ELSE round(w.tokens * w.paid_turns * sp.read_mtok / 1e6, 6)
       END AS usd,
       -- by file_id, a number: a session id comes from a file's name and could quote its way out
       CASE w.kind
           WHEN 'large_result' THEN 'txdb persist-tools --where "file_id = ' || w.file_id
                || ' and kind = ''tool_result'' and result_tokens >= 5000"'
           WHEN 'repeated_read' THEN 'txdb persist-tools --where "file_id = ' || w.file_id
                || ' and tool_use_id in (select tool_use_id from repeated_reads where file_id = ' || w.file_id || ')"'
           WHEN 'cache_rebuild' THEN 'txdb rescue --where "file_id = ' || w.file_id || '" --target 100000'
           ELSE 'txdb strip-attachments --where "file_id = ' || w.file_id || ' and policy_keeps = 0"'
       END AS reclaim
FROM waste_found w
JOIN session_price sp ON sp.file_id = w.file_id
WHERE w.kind <> 'cache_rebuild' OR w.paid_turns > 0;
