"""The full-text index of a bulk build, built beside the catalog.

Tokenizing block text is the largest single cost of a first refresh, and
the process writing the catalog is the busier one. So in a bulk build the
parse worker also indexes the text it parsed, into an FTS5 table of the
same definition in a sidecar database, numbering the blocks as the writer
will store them. At the end the sidecar's FTS5 shadow tables (``_data``,
``_idx``, ``_docsize``, ``_config``: the whole state of an FTS5 index) are
copied over the catalog's still-empty ones, through a connection that has
not read that index yet, so no cached index structure goes stale.

The copy is taken only when the sidecar says it finished and its rows
match the catalog's blocks; otherwise (no worker, an older sidecar, any
doubt) the catalog indexes its own blocks, which is always correct.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SHADOW_TABLES = ("data", "idx", "docsize", "config")
# Which blocks are indexed: the same rule as the catalog's insert trigger.
INDEXED = "text IS NOT NULL AND text <> ''"


def index_sql(conn: sqlite3.Connection) -> str:
    """The catalog's CREATE VIRTUAL TABLE for blocks_fts."""
    return conn.execute("SELECT sql FROM sqlite_master WHERE name = 'blocks_fts'").fetchone()[0]


class SidecarWriter:
    """Index (rowid, text) pairs into a sidecar database (in the worker)."""

    def __init__(self, path: str, create_sql: str):
        from ..db import create_private  # private like the catalog it is adopted into

        create_private(path)
        self.conn = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode = OFF", "synchronous = OFF", "locking_mode = EXCLUSIVE"):
            self.conn.execute(f"PRAGMA {pragma}")
        self.conn.execute(create_sql)
        self.conn.execute("CREATE TABLE _txdb_fts_done (documents INTEGER, last_rowid INTEGER)")
        self.conn.execute("BEGIN")
        self.documents = 0
        self.last_rowid = 0

    def add(self, rows: list[tuple[int, str | None]]) -> None:
        docs = [(rowid, text) for rowid, text in rows if text]
        if docs:
            self.conn.executemany("INSERT INTO blocks_fts (rowid, text) VALUES (?, ?)", docs)
            self.documents += len(docs)
        if rows:
            self.last_rowid = rows[-1][0]

    def finish(self) -> None:
        self.conn.execute("INSERT INTO _txdb_fts_done VALUES (?, ?)", (self.documents, self.last_rowid))
        self.conn.execute("COMMIT")
        self.conn.close()


def adopt_or_build(conn: sqlite3.Connection, sidecar: Path) -> str:
    """Fill the catalog's empty full-text index: from the sidecar if it is
    complete and matches, else from the catalog's own blocks. ``conn`` must
    not have read the index before. Returns "sidecar" or "built"."""
    documents, last_rowid = conn.execute(
        f"SELECT count(*) FILTER (WHERE {INDEXED}), coalesce(max(rowid), 0) FROM blocks"
    ).fetchone()
    if sidecar.exists() and _sidecar_matches(conn, sidecar, documents, last_rowid):
        conn.execute("ATTACH DATABASE ? AS fts_sidecar", (str(sidecar),))
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for t in SHADOW_TABLES:
                    conn.execute(f"DELETE FROM main.blocks_fts_{t}")
                    conn.execute(f"INSERT INTO main.blocks_fts_{t} SELECT * FROM fts_sidecar.blocks_fts_{t}")
                conn.execute("COMMIT")
                return "sidecar"
            except sqlite3.Error:
                conn.execute("ROLLBACK")  # e.g. shadow tables read-only: index here instead
        finally:
            conn.execute("DETACH DATABASE fts_sidecar")
    conn.execute("BEGIN IMMEDIATE")
    if conn.execute("SELECT 1 FROM blocks_fts_docsize LIMIT 1").fetchone():
        conn.execute("INSERT INTO blocks_fts (blocks_fts) VALUES ('delete-all')")  # a resumed build's
    conn.execute(f"INSERT INTO blocks_fts (rowid, text) SELECT rowid, text FROM blocks WHERE {INDEXED}")
    conn.execute("COMMIT")
    return "built"


def _sidecar_matches(conn: sqlite3.Connection, sidecar: Path, documents: int, last_rowid: int) -> bool:
    try:
        side = sqlite3.connect(f"{sidecar.resolve().as_uri()}?mode=ro", uri=True)
        try:
            row = side.execute("SELECT documents, last_rowid FROM _txdb_fts_done").fetchone()
            same_definition = side.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'blocks_fts'").fetchone() == (index_sql(conn),)
        finally:
            side.close()
    except sqlite3.Error:
        return False
    empty = conn.execute("SELECT count(*) FROM blocks_fts_docsize").fetchone()[0] == 0
    return empty and same_definition and row == (documents, last_rowid)
