"""SQL helpers below every catalog module: a transaction, rows as dicts and a
LIKE pattern that matches a text literally.
Kept apart from db.py so that cost.py, which db.py calls on open, needs no db."""

from __future__ import annotations

import contextlib
import sqlite3


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection):
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")



def rows(conn: sqlite3.Connection, sql: str, params=()) -> list[dict]:
    """The rows of a query as dicts keyed by column name. (sqlite-utils'
    ``Database.query`` does the same, but importing it would double the
    CLI's start-up: it serves ``open_db`` only.)"""
    cur = conn.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def like_literal(text: str) -> str:
    """``text`` as a LIKE pattern that matches itself (its ``%``, ``_`` and
    ``\\`` escaped), for ``LIKE ? ESCAPE '\\'``; add the wildcards around it."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")

