"""Which row of an API message counts (``usage.billed``, migration 042),
kept at refresh so that ``billed_usage`` reads a flag instead of ranking
every usage row of the catalog for each page (most of a second at 10
copies of the corpus, paid by every cost page and the front page).

A message id + request id is one API call whichever file repeats it (a
forked subagent transcript, a fork, a copy of a session file): it counts
in one of those files, the one with the largest total, then a session
file before a subagent, then a file whose line is not a fork's copy (no
forkedFrom), then the first path; so which file was read first never
matters. Rows without a message id (``uuid:...``) are never merged and
always count.

The rank depends on the rows of the files that repeat a message, so it is
computed again for a message whenever one of its rows may have changed:
at the end of each file's refresh for the messages it wrote
(``store._end_file``), and by the triggers of migration 042 when a
counted row is deleted or a file's path or kind changes."""

from __future__ import annotations

import sqlite3

# The billed total (usage_context's billed_tokens) over usage's own columns.
_TOTAL = ("coalesce(v.input_tokens, 0) + coalesce(v.output_tokens, 0) "
          "+ coalesce(v.cache_read_input_tokens, 0) + coalesce(v.cache_creation_input_tokens, 0)")

# Rank the rows of the messages {ids} (an SQL list of message ids) and set
# billed on the first of each, clear it on the others, touching only rows
# whose flag changes.
RANK = f"""
UPDATE usage SET billed = (k.rank_in_message = 1)
FROM (
    SELECT v.file_id, v.message_id,
           row_number() OVER (
               PARTITION BY v.message_id, v.request_id
               ORDER BY {_TOTAL} DESC, g.kind = 'session' DESC,
                        NOT EXISTS (SELECT 1 FROM records r INDEXED BY records_forked
                                    WHERE r.file_id = v.file_id AND r.offset = v.offset AND r.forked) DESC,
                        g.path) AS rank_in_message
    FROM usage v
    JOIN files g ON g.id = v.file_id
    WHERE v.message_id IN ({{ids}}) AND v.message_id NOT LIKE 'uuid:%'
) k
WHERE usage.file_id = k.file_id AND usage.message_id = k.message_id
  AND usage.billed IS NOT (k.rank_in_message = 1)
"""

_FILE_IDS = "SELECT m.message_id FROM usage m WHERE m.file_id = ?"
_GIVEN_IDS = "SELECT j.value FROM json_each(?) j"


def rank_file(conn: sqlite3.Connection, file_id: int, message_ids: list[str] | None = None) -> None:
    """Rank again the messages of one file: all of its rows, or only
    ``message_ids`` (the rows an appended tail wrote)."""
    if message_ids is None:
        conn.execute(RANK.format(ids=_FILE_IDS), (file_id,))
    elif message_ids:
        import orjson

        conn.execute(RANK.format(ids=_GIVEN_IDS), (orjson.dumps(message_ids).decode(),))


def rank_all(conn: sqlite3.Connection) -> None:
    """Rank every message (migration 042's fill of an existing catalog)."""
    conn.execute(RANK.format(ids="SELECT m.message_id FROM usage m"))


# The triggers that keep the flag when a row or file changes outside a
# file's refresh: a counted row deleted (a pruned file; its message then
# counts in another file, if any) and a file renamed (kept aside, restored,
# found under a link) or given another kind.
TRIGGERS = (
    "CREATE TRIGGER usage_billed_deleted AFTER DELETE ON usage "
    "WHEN old.billed AND old.message_id NOT LIKE 'uuid:%' BEGIN "
    + RANK.format(ids="old.message_id") + "; END",
    "CREATE TRIGGER files_billed_moved AFTER UPDATE OF path, kind ON files "
    "WHEN old.path IS NOT new.path OR old.kind IS NOT new.kind BEGIN "
    + RANK.format(ids="SELECT m.message_id FROM usage m WHERE m.file_id = new.id") + "; END",
)


def migrate(conn: sqlite3.Connection) -> None:
    """Migration 042's step, after its column: the flag of every row, then
    the triggers."""
    rank_all(conn)
    for sql in TRIGGERS:
        conn.execute(sql)
