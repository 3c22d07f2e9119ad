"""Which catalogued transcripts make up one session on disk.

A session is its ``<id>.jsonl``, the subagent transcripts in its folder
(``<id>/subagents/*.jsonl``) and, from releases that wrote them beside the
sessions, the ``agent-*.jsonl`` files of its project folder whose lines name
it (``sessions.parent_session_id``). restore, prune and the gone listing
read a session this way. A subagent transcript whose session file the
catalog never held (swept before txdb saw it, or never copied) is a session
of its own here: *lone*, named by the session id its folder or its lines
give, and given back or pruned as one.

Another session's file put at a session's path (its lines name another
session) is a session of its own there: the transcripts and files of the
folder belong to the session file at that path whose id they name (a
subagent transcript's lines; the folder's name), when the catalog holds one.
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
    owns_folder: bool = True  # the files of <id>/ are its (not another session's at the same path)
    own_id: str | None = None  # the session file's own session id (its lines'), None when lone

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


def session_ids_at(conn: sqlite3.Connection, session_path: str) -> set[str | None]:
    """The session ids of the session files catalogued at ``session_path``
    (the live one, gone ones, versions kept aside)."""
    return {sid for (sid,) in conn.execute(
        "SELECT session_id FROM files WHERE kind = 'session' AND (path = ? OR (path > ? AND path < ?))",
        (session_path, *archived_bounds(session_path)))}


def is_anothers_path(conn: sqlite3.Connection, path: str, session_id: str | None) -> bool:
    """Whether the session file path ``path`` (or a version of it kept
    aside) is named for a session other than ``session_id`` that the
    catalog holds there: a file of ``session_id`` put at another session's
    path, which is that session's (its folder, where restore gives it back)."""
    base = archived_from(path) or path
    stem = session_stem(base)
    return session_id is not None and session_id != stem and stem in session_ids_at(conn, base)


def subagents(conn: sqlite3.Connection, session_path: str, session_id: str | None = None) -> list[Row]:
    """The catalogued subagent transcripts of the session at ``session_path``:
    those under its folder, and the ``agent-*.jsonl`` beside it naming it.
    With ``session_id`` (the session file's own, from its lines), only those
    of that session: a transcript whose lines name another session (the
    folder's name when they name none) that has a file at this path is that
    session's."""
    stem = session_stem(session_path)
    prefix = str(Path(session_path).parent / stem) + os.sep
    rows = conn.execute("SELECT f.id, f.path, f.kind, f.gone, coalesce(s.parent_session_id, ?) FROM files f "
                        "LEFT JOIN sessions s ON s.file_id = f.id WHERE f.kind = 'subagent' AND substr(f.path, 1, ?) = ? "
                        "ORDER BY f.path", (stem, len(prefix), prefix)).fetchall()
    beside = str(Path(session_path).parent) + os.sep
    rows += [(*r, stem) for r in conn.execute(
        "SELECT f.id, f.path, f.kind, f.gone FROM files f JOIN sessions s ON s.file_id = f.id "
        "WHERE f.kind = 'subagent' AND s.parent_session_id = ? AND substr(f.path, 1, ?) = ? ORDER BY f.path",
        (stem, len(beside), beside)).fetchall()
        if os.sep not in r[1][len(beside):] and session_path_of(r[1], stem) == session_path]
    others = session_ids_at(conn, session_path) - {session_id} if session_id is not None else set()
    return [r[:4] for r in rows if r[4] not in others]


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
        (own,) = conn.execute("SELECT session_id FROM files WHERE id = ?", (fid,)).fetchone()
        return Unit(base, [(fid, path, kind, gone), *subagents(conn, base, own)], False,
                    not is_anothers_path(conn, base, own), own)
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
