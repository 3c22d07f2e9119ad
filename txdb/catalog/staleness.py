"""When the catalog's copy of a file is out of date: the one rule, in a
module that imports nothing heavy (the Claude Code hook decides with it
whether it has anything to do); and under which path the catalog has a
file (a surgery pass finds its session with it without loading ingest)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


def stale(conn, path: str) -> bool:
    """True when the file on disk differs (size or mtime) from what the
    catalog indexed, or a migration marked it to be read again (its
    figures follow a rule changed since: ``files.inode`` cleared,
    docs/architecture.md "Re-deriving stored figures"); a file gone from
    disk is not stale (its rows are kept)."""
    row = conn.execute("SELECT size, mtime_ns, inode FROM files WHERE path = ?", (path,)).fetchone()
    try:
        st = os.stat(path)
    except OSError:
        return False  # gone: the catalog keeps its rows
    return row is None or row[0] != st.st_size or row[1] != st.st_mtime_ns or row[2] is None


def marked_for_reread(conn) -> tuple[int, list[str]]:
    """How many catalogued files a migration marked to be read again (their
    stored figures are of an older rule until a refresh reads them), and
    the projects roots they were found under (what that refresh must be given)."""
    rows = conn.execute("SELECT root, count(*) FROM files WHERE inode IS NULL AND gone = 0 GROUP BY root").fetchall()
    return sum(n for _r, n in rows), sorted(r for r, _n in rows if r)


def same_file(path: str, st: os.stat_result) -> bool:
    """Whether ``path`` is the file ``st`` describes (device and inode)."""
    try:
        other = os.stat(path)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)


def catalogued_path(conn: sqlite3.Connection, path: str | Path, st: os.stat_result | None = None) -> str | None:
    """The path under which the catalog has the file at ``path``: that path,
    its real path, or another path to the same file (a symlink to it, or
    its target); None when the catalog lacks the file."""
    p = Path(path)
    real = os.path.realpath(p)
    for candidate in dict.fromkeys((str(p), real)):
        if conn.execute("SELECT 1 FROM files WHERE path = ?", (candidate,)).fetchone():
            return candidate
    try:
        st = st or os.stat(p)
    except OSError:
        return None
    for (other,) in conn.execute("SELECT path FROM files WHERE inode = ?", (st.st_ino,)).fetchall():
        if same_file(other, st):
            return other
    # A link whose target was replaced since (a surgery wrote through it):
    # its row still has the old inode. Only paths the catalog lacks get here.
    for (other,) in conn.execute("SELECT path FROM files").fetchall():
        if os.path.realpath(other) == real and same_file(other, st):
            return other
    return None
