"""What fills each session file's active chain, by content type, kept in
``type_sums`` (migration 039) so that ``analyze_by_type`` and
``context_by_category`` read a few rows per file instead of summing every
chain block of the catalog per page (1 s at 10 copies of the corpus).

Refresh stores a file's rows at the end of its transaction, after its
chain, so every path that changes a file's rows (a refresh, grown or read
again, an applied surgery, undo, restore) stores them again; a deleted
file's rows go with its other rows (``store._delete_file_rows``)."""

from __future__ import annotations

import sqlite3

# One statement per category, each for one file (?1): its blocks on the
# chain by kind, its attachments (the system prompt apart), the envelope
# each block is sent in with its message's wrapper (a record's tokens
# beyond its blocks'), and the system prompt: the latest snapshot of each
# type in the file, on the chain or not (the view system_prompt's rule).
# The chain drives the first and third (CROSS JOIN keeps that order): a
# long session's chain is often a fraction of its rows (after a compaction,
# a rewind), and the planner would look up every block and record of the
# file in the chain instead (3-6x slower on a 100 MB session, refreshed at
# each appended line). records_sizes covers what the third reads (the
# planner takes the unique key and reads every row).
SUMS_SELECT = """
SELECT b.file_id, b.session_id, b.kind, count(*), sum(b.chars), sum(b.signature_chars), sum(b.tokens)
FROM chain c
CROSS JOIN blocks b ON b.file_id = c.file_id AND b.offset = c.offset
WHERE c.file_id = ?1
GROUP BY b.file_id, b.kind
UNION ALL
SELECT a.file_id, a.session_id, 'attachment', count(*), NULL, NULL, sum(a.tokens)
FROM attachments a
JOIN chain c ON c.file_id = a.file_id AND c.offset = a.offset
WHERE a.file_id = ?1 AND a.policy <> 'system-prompt'
GROUP BY a.file_id
UNION ALL
SELECT r.file_id, r.session_id, 'envelope', count(*), NULL, NULL,
       sum(r.tokens - (SELECT coalesce(sum(b.tokens), 0) FROM blocks b
                       WHERE b.file_id = r.file_id AND b.offset = r.offset))
FROM chain c
CROSS JOIN records r INDEXED BY records_sizes ON r.file_id = c.file_id AND r.offset = c.offset
WHERE c.file_id = ?1 AND r.type IS NOT 'attachment'
  AND EXISTS (SELECT 1 FROM blocks b WHERE b.file_id = r.file_id AND b.offset = r.offset)
GROUP BY r.file_id
UNION ALL
SELECT a.file_id, a.session_id, 'system_prompt', count(*), NULL, NULL, sum(a.tokens)
FROM attachments a
WHERE a.file_id = ?1 AND a.policy = 'system-prompt'
  AND a.offset = (SELECT max(m.offset) FROM attachments m WHERE m.file_id = a.file_id AND m.type = a.type)
GROUP BY a.file_id
"""
SUMS_SQL = ("INSERT INTO type_sums (file_id, session_id, category, items, chars, signature_chars, tokens)"
            + SUMS_SELECT)


def store(conn: sqlite3.Connection, file_id: int) -> None:
    """Sum the file's chain by content type again (inside the caller's transaction)."""
    conn.execute("DELETE FROM type_sums WHERE file_id = ?", (file_id,))
    conn.execute(SUMS_SQL, (file_id,))


def store_all(conn: sqlite3.Connection) -> None:
    """Every file's sums (migration 039, over a catalog refreshed before it)."""
    for (file_id,) in conn.execute("SELECT id FROM files").fetchall():
        store(conn, file_id)
