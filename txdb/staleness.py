"""When the catalog's copy of a file is out of date: the one rule, in a
module that imports nothing heavy (the Claude Code hook decides with it
whether it has anything to do)."""

from __future__ import annotations

import os


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


def marked_for_reread(conn) -> int:
    """How many catalogued files a migration marked to be read again (their
    stored figures are of an older rule until a refresh reads them)."""
    return conn.execute("SELECT count(*) FROM files WHERE inode IS NULL AND gone = 0").fetchone()[0]
