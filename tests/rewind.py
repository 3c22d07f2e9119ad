"""Turn a catalog back into the schema it had before a migration, so a test
can check what that migration (and every later one) does to real rows.

Each later migration is undone from its own SQL: an added column is
dropped, a created table or index is dropped, and its row in
``_txdb_migrations`` is deleted; views and ``_txdb_meta`` are cleared (they
are rebuilt at open). Data a migration rewrote is left as it is: the test
sets the figures it needs. A new migration needs no edit here.
"""

from __future__ import annotations

import re
import sqlite3

from txdb.catalog import db

_ADD_COLUMN = re.compile(r"ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)", re.I)
_CREATE_TABLE = re.compile(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)
_COMMENT = re.compile(r"--[^\n]*")
_CREATE_INDEX = re.compile(r"CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)


def rewind(conn: sqlite3.Connection, before: str) -> list[str]:
    """Undo every applied migration whose name sorts at or after ``before``
    (a prefix such as ``"013"``); return their names, latest first."""
    for (v,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        conn.execute(f'DROP VIEW "{v}"')  # first: a view naming a column would stop its drop
    conn.execute("DELETE FROM _txdb_meta")
    applied = {r[0] for r in conn.execute("SELECT name FROM _txdb_migrations")}
    undone = []
    for name, sql in reversed(db.migrations()):
        if name < before or name not in applied:
            continue
        statements = [_COMMENT.sub("", s).strip() for s in db._split(sql)]
        for s in statements:
            if m := _CREATE_INDEX.match(s):
                conn.execute(f'DROP INDEX IF EXISTS "{m[1]}"')
        for s in statements:
            if m := _ADD_COLUMN.match(s):
                for (index,) in conn.execute("SELECT name FROM pragma_index_list(?) WHERE origin = 'c'", (m[1],)) \
                        .fetchall():
                    cols = {r[0] for r in conn.execute("SELECT name FROM pragma_index_info(?)", (index,))}
                    if m[2] in cols:
                        conn.execute(f'DROP INDEX "{index}"')
                conn.execute(f'ALTER TABLE "{m[1]}" DROP COLUMN "{m[2]}"')
        for s in reversed(statements):
            if (m := _CREATE_TABLE.match(s)) and not m[1].startswith("_txdb"):
                conn.execute(f'DROP TABLE IF EXISTS "{m[1]}"')
        conn.execute("DELETE FROM _txdb_migrations WHERE name = ?", (name,))
        undone.append(name)
    return undone
