"""Whether a file recorded a turn only a 1M context window holds
(``sessions.long_context``, migration 042): a model named with [1m], or a
gauge past 200k. context_gauge's window rule reads it, which otherwise
looked through every usage row of every session for each page that shows
a gauge (a fifth of a second at 10 copies of the corpus). Migration 042
fills it once the views are back (db.AFTER_VIEWS), and refresh fills any
row still NULL; a NULL row's gauge looks the rows up itself, by the same
rule."""

from __future__ import annotations

import sqlite3

from txdb.catalog.sqlutil import transaction

# The rule, over usage_context's figures (its gauge_tokens); {rows} picks
# the rows looked at.
_ANY = ("EXISTS (SELECT 1 FROM usage_context w WHERE w.file_id = {file} AND {rows}"
        " AND (w.model LIKE '%[1m]%' OR w.gauge_tokens > 200000))")
_FILE = "UPDATE sessions SET long_context = " + _ANY.format(file="?1", rows="1") + " WHERE file_id = ?1"
_TOUCHED = ("UPDATE sessions SET long_context = "
            + _ANY.format(file="?1", rows="w.message_id IN (SELECT j.value FROM json_each(?2) j)")
            + " WHERE file_id = ?1")
_UNSET = ("UPDATE sessions SET long_context = " + _ANY.format(file="sessions.file_id", rows="1")
          + " WHERE long_context IS NULL")


def store(conn: sqlite3.Connection, file_id: int, message_ids: list[str] | None = None) -> None:
    """At the end of a file's refresh: from all its rows, or, for an
    appended tail (``message_ids``, the messages it wrote) of a file that
    had no such turn, from those alone (the others had none)."""
    if message_ids is not None:
        row = conn.execute("SELECT long_context FROM sessions WHERE file_id = ?", (file_id,)).fetchone()
        if row is not None and row[0] == 0:
            if message_ids:
                import orjson

                conn.execute(_TOUCHED, (file_id, orjson.dumps(message_ids).decode()))
            return
    conn.execute(_FILE, (file_id,))


def fill(conn: sqlite3.Connection) -> None:
    """The files a catalog from before 042 has not read since, in one
    transaction (none, and no write, when every file has it)."""
    if conn.execute("SELECT 1 FROM sessions WHERE long_context IS NULL LIMIT 1").fetchone() is None:
        return
    with transaction(conn):
        conn.execute(_UNSET)
