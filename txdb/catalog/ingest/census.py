"""The format census of one file: per CLI version, how many lines of each
line type, attachment type, block type and envelope key it holds, kept in
the table ``file_formats`` (one row per (file, version, kind, name)) for the
view ``format_census``. What txdb models is read from ``known_formats``,
never stored, so a txdb that learns a type shows it as modelled at once.

A line without a ``version`` counts under its session's version.
"""

from __future__ import annotations

import sqlite3
from collections import Counter

UPSERT = ("INSERT INTO file_formats (file_id, version, kind, name, n) VALUES (?,?,?,?,?) "
          "ON CONFLICT (file_id, version, kind, name) DO UPDATE SET n = n + excluded.n")


class Census:
    """Counts of the lines read in one pass over a file."""

    __slots__ = ("version", "keysets", "names")

    def __init__(self) -> None:
        self.version: str | None = None  # of the line being read
        self.keysets: Counter = Counter()  # (version, line type, tuple of keys) -> lines
        self.names: Counter = Counter()  # (version, 'attachment' | 'block', type) -> count

    def line(self, obj: dict, rtype: str | None) -> None:
        v = obj.get("version")
        self.version = v if type(v) is str and v else None
        self.keysets[(self.version, rtype or "", tuple(obj))] += 1

    def add(self, kind: str, name) -> None:
        self.names[(self.version, kind, name if type(name) is str else "")] += 1

    def rows(self) -> Counter:
        out: Counter = Counter()
        for (v, rtype, keys), n in self.keysets.items():
            out[(v, "line", rtype)] += n
            for k in keys:
                out[(v, "key", k)] += n
        out.update(self.names)
        return out


def store(conn: sqlite3.Connection, file_id: int, census: Census) -> None:
    """Add one pass's counts to the file's rows (the session row is current)."""
    row = conn.execute("SELECT version FROM sessions WHERE file_id = ?", (file_id,)).fetchone()
    fallback = (row[0] if row else None) or ""
    conn.executemany(UPSERT, [(file_id, v or fallback, kind, name, n)
                              for (v, kind, name), n in census.rows().items()])
