"""Which catalogued transcripts make up one session on disk.

A session is its ``<id>.jsonl``, the subagent transcripts in its folder
(``<id>/subagents/*.jsonl``) and, from releases that wrote them beside the
sessions, the ``agent-*.jsonl`` files of its project folder whose lines name
it (``sessions.parent_session_id``). restore, prune and the gone listing
read a session this way. A subagent transcript whose session file the
catalog never held (swept before txdb saw it, or never copied) is a session
of its own here: *lone*, named by the session id its folder or its lines
give, and given back or pruned as one.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from txdb.model.paths import SESSION_DIR, SESSION_SUFFIX, SUBAGENTS, archived_bounds, archived_from, session_stem

# A file row: (files.id, path, kind, gone).
Row = tuple[int, str, str, int]


@dataclass
class Unit:
    session_path: str    # where the session's own file is, or would be
    files: list[Row]     # its catalogued transcripts: the session file first, when there is one
    lone: bool           # the catalog holds no session file: subagent transcripts only

    @property
    def session_id(self) -> str:
        return session_stem(self.session_path)

    @property
    def folder(self) -> Path:
        """The project folder the session's files are under."""
        return Path(self.session_path).parent


def session_path_of(path: str, parent_session_id: str | None) -> str | None:
    """The session file the subagent transcript at ``path`` (or a version of
    it kept aside) belongs to: ``P/<id>.jsonl`` for ``P/<id>/subagents/x.jsonl``;
    for an ``agent-*.jsonl`` beside the sessions, the one its lines name, when
    that is a session id (text from the file builds no path otherwise)."""
    p = Path(archived_from(path) or path)
    if p.parent.name == SUBAGENTS:
        return str(p.parent.parent) + SESSION_SUFFIX
    if parent_session_id and SESSION_DIR.fullmatch(parent_session_id):
        return str(p.parent / (parent_session_id + SESSION_SUFFIX))
    return None


def session_file(conn: sqlite3.Connection, session_path: str, session_id: str | None = None) -> Row | None:
    """The catalogued session file at ``session_path``: the one whose session
    id is ``session_id`` (what a subagent transcript's lines name: another
    session's file put at a gone session's path is not its session), then
    live first, then the newest version kept aside; or None."""
    return conn.execute(
        "SELECT id, path, kind, gone FROM files WHERE kind = 'session' AND (path = ? OR "
        "(path > ? AND path < ?)) ORDER BY session_id IS ? DESC, gone, id DESC LIMIT 1",
        (session_path, *archived_bounds(session_path), session_id),
    ).fetchone()


def subagents(conn: sqlite3.Connection, session_path: str) -> list[Row]:
    """The catalogued subagent transcripts of the session at ``session_path``:
    those under its folder, and the ``agent-*.jsonl`` beside it naming it."""
    stem = session_stem(session_path)
    prefix = str(Path(session_path).parent / stem) + os.sep
    rows = conn.execute("SELECT id, path, kind, gone FROM files WHERE kind = 'subagent' AND substr(path, 1, ?) = ? "
                        "ORDER BY path", (len(prefix), prefix)).fetchall()
    beside = str(Path(session_path).parent) + os.sep
    rows += [r for r in conn.execute(
        "SELECT f.id, f.path, f.kind, f.gone FROM files f JOIN sessions s ON s.file_id = f.id "
        "WHERE f.kind = 'subagent' AND s.parent_session_id = ? AND substr(f.path, 1, ?) = ? ORDER BY f.path",
        (stem, len(beside), beside)).fetchall()
        if os.sep not in r[1][len(beside):] and session_path_of(r[1], stem) == session_path]
    return rows


def unit_of(conn: sqlite3.Connection, file_id: int) -> Unit | None:
    """The session the catalogued file ``file_id`` is part of (None: no such
    row). A subagent transcript whose session names no session file is a lone
    session of that one file."""
    row = conn.execute("SELECT f.id, f.path, f.kind, f.gone, s.parent_session_id FROM files f "
                       "LEFT JOIN sessions s ON s.file_id = f.id WHERE f.id = ?", (file_id,)).fetchone()
    if row is None:
        return None
    fid, path, kind, gone, parent = row
    base = archived_from(path) or path
    if kind == "session":
        return Unit(base, [(fid, path, kind, gone), *subagents(conn, base)], False)
    sp = session_path_of(path, parent)
    if sp is None:  # nothing names its session: the file alone, as a session of its own
        return Unit(base, [(fid, path, kind, gone), *subagents(conn, base)], True)
    head = session_file(conn, sp, parent)
    files = subagents(conn, sp)
    if not any(r[0] == fid for r in files):  # a version kept aside of one of them
        files.append((fid, path, kind, gone))
    return Unit(sp, ([head] if head else []) + files, head is None)


def lone_subagents(conn: sqlite3.Connection, session_id: str, min_prefix: int | None = None) -> list[Row]:
    """The subagent transcripts that name ``session_id`` as their session
    (by their folder or their lines) and whose session file the catalog
    does not hold, gone ones first; with ``min_prefix``, a ``session_id``
    that long or longer also names the sessions it starts (literally)."""
    by_prefix = min_prefix is not None and len(session_id) >= min_prefix
    out = []
    for fid, path, kind, gone, parent in conn.execute(
            "SELECT f.id, f.path, f.kind, f.gone, s.parent_session_id FROM files f JOIN sessions s ON s.file_id = f.id "
            "WHERE f.kind = 'subagent' AND (s.parent_session_id = ?1 OR (?2 AND substr(s.parent_session_id, 1, "
            "length(?1)) = ?1)) ORDER BY f.gone DESC, f.id DESC", (session_id, by_prefix)):
        sp = session_path_of(path, parent)
        if sp is not None and session_stem(sp).startswith(session_id) and session_file(conn, sp) is None:
            out.append((fid, path, kind, gone))
    return out
