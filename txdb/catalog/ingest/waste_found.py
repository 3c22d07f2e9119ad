"""The waste each session file holds, found at refresh and kept in
``waste_found`` (migration 043), so that the views ``waste_items`` and
``waste`` price a few stored rows instead of finding every item of the
catalog again for each page, count and facet (3 s at 10 copies of the
corpus).

What is stored depends only on the file's own rows (its blocks, chain,
attachments and usage), never on prices: the views price each row when
read. One column also follows the other files: ``paid_turns``, the turns
after an item whose API message counts in this file (``usage.billed``, the
rule cost counts each message once by: a fork, a resumed copy or a
restored copy repeats another file's messages, and pays for none of them).
It is found with the rest, then kept by the trigger ``TRIGGER`` whenever
a row's ``billed`` changes (another file's refresh, a prune, a move).
Refresh stores a file's rows at the end of its transaction, after its
chain, as it does ``type_sums``; a deleted file's rows go with its other
rows (``store._delete_file_rows``). A change to the rules below must find
every file's waste again (``store_all``, or a rules bump that rereads them:
docs/architecture.md, "Schema changes")."""

from __future__ import annotations

import sqlite3

# One file (?1). The rules are waste_items' (sql/views/7w_waste_items.sql
# documents them), over the tables rather than the views: the migration
# fills the table while the views are dropped. results is block_targets'
# tool results on the chain, reads is repeated_reads, and the reminders are
# attachment_targets' rows with policy_keeps = 0.
FOUND_SELECT = """
WITH turns AS (
    SELECT c.file_id, c.pos, u.timestamp,
           coalesce(u.cache_creation_input_tokens, 0) AS cache_created,
           coalesce(u.cache_read_input_tokens, 0) AS cache_read,
           u.billed AS paid  -- its API message counts in this file (billed_usage)
    FROM usage u  -- usage first: it has no index by offset to be looked up from the chain
    CROSS JOIN chain c ON c.file_id = u.file_id AND c.offset = u.offset
    WHERE u.file_id = ?1 AND u.in_file = 1
),
results AS (
    SELECT b.file_id, c.pos, r.line, b.tool_use_id, b.tool_name, b.is_error, b.tokens
    -- the file's tool results first (CROSS JOIN keeps that order): the planner
    -- would scan them again for each chain record
    FROM blocks b
    CROSS JOIN chain c ON c.file_id = b.file_id AND c.offset = b.offset
    CROSS JOIN records r ON r.file_id = b.file_id AND r.offset = b.offset
    JOIN files f ON f.id = b.file_id
    WHERE b.file_id = ?1 AND b.kind = 'tool_result'
),
reads AS (
    SELECT r.file_id, r.pos, r.line, r.tool_use_id, r.file_path, r.tokens
    FROM (
        SELECT res.file_id, res.pos, res.line, res.tool_use_id, res.tokens,
               json_extract(u.text, '$.file_path') AS file_path,
               count(*) OVER (PARTITION BY res.file_id, json_extract(u.text, '$.file_path')
                              ORDER BY res.pos DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS later_reads
        FROM results res
        JOIN blocks u ON u.file_id = res.file_id AND u.tool_use_id = res.tool_use_id AND u.kind = 'tool_use'
        WHERE res.tool_name = 'Read' AND res.is_error = 0 AND json_valid(u.text)
    ) r
    WHERE r.later_reads > 0 AND r.file_path IS NOT NULL
),
items AS (
    SELECT 'large_result' AS kind, b.file_id, b.pos, b.line, b.tool_use_id AS item, b.tool_name AS detail, b.tokens
    FROM results b
    WHERE b.tokens >= 5000 AND b.tool_use_id NOT IN (SELECT tool_use_id FROM reads)
    UNION ALL
    SELECT 'repeated_read', r.file_id, r.pos, r.line, r.tool_use_id, r.file_path, r.tokens
    FROM reads r
    UNION ALL
    SELECT 'reminder', a.file_id, c.pos, r.line, CAST(a.offset AS TEXT), a.type, a.tokens
    FROM (
        -- newer: a later line of its type in the file (one window, not a lookup per line)
        SELECT x.*, x.offset < max(x.offset) OVER (PARTITION BY x.type) AS newer
        FROM attachments x WHERE x.file_id = ?1
    ) a
    JOIN records r ON r.file_id = a.file_id AND r.offset = a.offset
    JOIN files f ON f.id = a.file_id
    JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset
    WHERE a.tokens > 0
      AND CASE
              WHEN a.policy <> 'superseded' THEN 1
              WHEN NOT a.newer THEN 1
              WHEN a.free = 1 THEN 1
              ELSE 0
          END = 0
)
SELECT file_id, kind, pos, line, item, detail, tokens, resent_turns, paid_turns
FROM (
    -- the turns after each item: items and turns in one list, latest first
    -- (an item before a turn at its own position), turns counted as they come
    SELECT e.*, sum(e.turn) OVER later AS resent_turns, sum(e.paid) OVER later AS paid_turns
    FROM (SELECT i.*, 0 AS turn, 0 AS paid FROM items i
          UNION ALL
          SELECT NULL, t.file_id, t.pos, NULL, NULL, NULL, NULL, 1, t.paid FROM turns t) e
    WINDOW later AS (ORDER BY e.pos DESC, e.turn ROWS UNBOUNDED PRECEDING)
)
WHERE turn = 0
UNION ALL
SELECT t.file_id, 'cache_rebuild', t.pos, NULL, t.timestamp,
       printf('%.0f min idle', (julianday(t.timestamp) - julianday(t.prev_at)) * 1440), t.cache_created, 1,
       t.paid
FROM (SELECT t.*, lag(t.timestamp) OVER (ORDER BY t.pos) AS prev_at FROM turns t) t
WHERE t.prev_at IS NOT NULL AND julianday(t.timestamp) - julianday(t.prev_at) > 5.0 / 1440
  AND t.cache_created > t.cache_read
"""
FOUND_SQL = ("INSERT INTO waste_found (file_id, kind, pos, line, item, detail, tokens, resent_turns, paid_turns)"
             + FOUND_SELECT)

# paid_turns kept when an API turn's message moves to or from its file (a
# usage row's billed changes: billed.RANK, at another file's refresh or by
# migration 042's triggers): the items before the turn gain or lose it, a
# rebuild at the turn is paid or not. A turn is a usage row of the last line
# of its message on the chain, as FOUND_SELECT has it.
TRIGGER = """
CREATE TRIGGER usage_billed_waste AFTER UPDATE OF billed ON usage
WHEN old.billed IS NOT new.billed AND new.in_file = 1 BEGIN
UPDATE waste_found SET paid_turns = paid_turns + CASE WHEN new.billed THEN 1 ELSE -1 END
WHERE file_id = new.file_id
  AND CASE WHEN kind = 'cache_rebuild'
           THEN pos = (SELECT c.pos FROM chain c WHERE c.file_id = new.file_id AND c.offset = new.offset)
           ELSE pos < (SELECT c.pos FROM chain c WHERE c.file_id = new.file_id AND c.offset = new.offset)
      END;
END
"""


def store(conn: sqlite3.Connection, file_id: int) -> None:
    """Find the file's waste again (inside the caller's transaction)."""
    conn.execute("DELETE FROM waste_found WHERE file_id = ?", (file_id,))
    conn.execute(FOUND_SQL, (file_id,))


def store_all(conn: sqlite3.Connection) -> None:
    """Every file's waste (over a catalog refreshed before the table had
    every column: migration 046)."""
    for (file_id,) in conn.execute("SELECT id FROM files").fetchall():
        store(conn, file_id)


def migrate(conn: sqlite3.Connection) -> None:
    """Migration 046's step, after its column: every file's waste, then the
    trigger that keeps paid_turns."""
    store_all(conn)
    conn.execute(TRIGGER)
