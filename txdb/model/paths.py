"""Every file-naming fact of a session, in one place.

A session is ``<projects>/<project>/<id>.jsonl``; its folder
``<project>/<id>/`` holds its subagents' transcripts
(``subagents/agent-<x>.jsonl``) and its side files: Claude Code's own
``tool-results/`` (``.tool-results/`` in older releases), the subagents'
``*.meta.json`` and txdb's ``persisted/``. txdb's copies sit beside the session file and only add to
its name: the pending copy ``<id>.jsonl.pending``, its snapshot record
``<id>.jsonl.pending.json``, backups ``<id>.jsonl.bak`` and ``.bak.N``, the
swap journal ``<id>.jsonl.swaps.json``. Names only, but for the few
functions that resolve a link (``original_path``) or look whether a pending
copy exists (``working_file``).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from txdb.errors import SurgeryError

SESSION_SUFFIX = ".jsonl"
PENDING_SUFFIX = ".pending"
PENDING_META_SUFFIX = ".pending.json"
BACKUP_SUFFIX = ".bak"
SWAPS_SUFFIX = ".swaps.json"
TOOL_RESULTS = "tool-results"
LEGACY_TOOL_RESULTS = ".tool-results"
SUBAGENTS = "subagents"
SUBAGENT_PREFIX = "agent-"
# The folders of a session's folder whose files Claude Code's start-up cleanup deletes one by one, by
# their own mtime, when the session file is not there (while it is, they go with it).
OWN_MTIME_DIRS = frozenset({SUBAGENTS, "workflows", "remote-agents", "before-cleanup"})

# Folders whose .jsonl files are never sessions.
SKIP_DIRS = frozenset({TOOL_RESULTS})
PERSISTED = "persisted"
# Folders in a session's folder whose files are the session's sidecars, and
# the suffix of the subagents' meta files beside their transcripts.
SIDECAR_DIRS = (TOOL_RESULTS, PERSISTED)
META_SUFFIX = ".meta.json"
# A session's own folder (``<uuid>/`` beside ``<uuid>.jsonl``) holds its
# subagents' transcripts in ``subagents/`` and side files the CLI keeps for
# itself (``resume-head.jsonl``, ``tool-results/``): only the first are sessions.
SESSION_DIR = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def is_session_name(name: str) -> bool:
    """A session file's name (``.pending`` and ``.bak`` copies end differently)."""
    return name.endswith(SESSION_SUFFIX)


def is_side_file(path: str | Path) -> bool:
    """A file inside a session's own folder that is not in its
    ``subagents/`` folder (``<uuid>/resume-head.jsonl``): the CLI's own
    bookkeeping, never a session."""
    parts = Path(path).parent.parts
    for i in range(len(parts) - 1, -1, -1):
        if SESSION_DIR.fullmatch(parts[i]):
            return parts[i + 1: i + 2] != (SUBAGENTS,)
    return False


def session_stem(path: str | Path) -> str:
    """The session's name in a session file's name, also for its copies
    (``X.jsonl.pending``, ``X.jsonl.bak.2`` -> ``X``)."""
    name = Path(path).name
    at = name.rfind(SESSION_SUFFIX)
    return name[:at] if at > 0 else name


def session_of_copy(path: str | Path) -> Path | None:
    """The session file a copy (pending, backup, journal) is named after;
    None for a name that is not a copy's."""
    p = Path(path)
    at = p.name.rfind(SESSION_SUFFIX)
    if at <= 0 or p.name.endswith(SESSION_SUFFIX):
        return None
    return p.with_name(p.name[: at + len(SESSION_SUFFIX)])


def is_pending_name(name: str) -> bool:
    return name.endswith(SESSION_SUFFIX + PENDING_SUFFIX)


def is_text_path(path: str) -> bool:
    """Whether a path is text (UTF-8 bytes): the catalog stores paths as
    text, so a file whose name is other bytes is named, never catalogued."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_path(path: str) -> str:
    """A path as text, bytes that are not UTF-8 as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace") if not is_text_path(path) else path


NOT_TEXT_PATH = "its name is not UTF-8 (the catalog stores text paths): rename it to index it"


# A gone file's catalogued version, its path moved aside when another file
# appears at that path (refresh keeps both): ``X.jsonl`` -> ``X.jsonl.archived-<files.id>``,
# a name discovery never takes for a session.
ARCHIVED_SUFFIX = ".archived-"


def archived_path(path: str, file_id: int) -> str:
    return f"{path}{ARCHIVED_SUFFIX}{int(file_id)}"


def archived_bounds(path: str) -> tuple[str, str]:
    """(lo, hi): the paths strictly between them are the versions of ``path``
    kept aside (``path > lo AND path < hi`` in SQL: an index range, not a scan)."""
    return path + ARCHIVED_SUFFIX, path + ARCHIVED_SUFFIX[:-1] + chr(ord(ARCHIVED_SUFFIX[-1]) + 1)


def archived_from(path: str) -> str | None:
    """The path an archived version was at (None for any other path)."""
    head, sep, tail = path.rpartition(ARCHIVED_SUFFIX)
    return head if sep and tail.isdigit() and head.endswith(SESSION_SUFFIX) else None


def is_backup_name(name: str) -> bool:
    return SESSION_SUFFIX + BACKUP_SUFFIX in name


def pending_of(session: str | Path) -> Path:
    s = Path(session)
    return s.with_name(s.name + PENDING_SUFFIX)


def pending_meta_of(session: str | Path) -> Path:
    s = Path(session)
    return s.with_name(s.name + PENDING_META_SUFFIX)


def backup_of(session: str | Path, n: int = 0) -> Path:
    """``.bak`` (n = 0), else ``.bak.N``."""
    s = Path(session)
    return s.with_name(s.name + BACKUP_SUFFIX + (f".{n}" if n else ""))


_BACKUP_N = re.compile(r"\.[1-9][0-9]{0,8}", re.ASCII)


def backup_number(session: str | Path, path: str | Path) -> int | None:
    """``n`` when ``path`` is ``backup_of(session, n)`` (the session's folder,
    the name txdb gives), None for any other path: a path read from a file
    in the tree (a journal entry, a log row) is only taken as a backup then."""
    s, p = Path(session), Path(path)
    if p.parent != s.parent or not p.name.startswith(s.name + BACKUP_SUFFIX):
        return None
    rest = p.name[len(s.name) + len(BACKUP_SUFFIX):]
    if not rest:
        return 0
    return int(rest[1:]) if _BACKUP_N.fullmatch(rest) else None


def swaps_of(session: str | Path) -> Path:
    s = Path(session)
    return s.with_name(s.name + SWAPS_SUFFIX)


def is_subagent(path: str | Path) -> bool:
    """A subagent transcript: ``<id>/subagents/agent-<x>.jsonl``."""
    p = Path(path)
    return p.parent.name == SUBAGENTS and p.name.startswith(SUBAGENT_PREFIX)


def parent_session_id(path: str | Path) -> str | None:
    """The parent session's id of a file in a ``subagents`` folder, by the layout."""
    p = Path(path)
    return p.parent.parent.name if p.parent.name == SUBAGENTS else None


def parent_session(path: str | Path) -> Path | None:
    """The parent session file of a subagent transcript (``<project>/<id>.jsonl``)."""
    p = Path(path)
    pid = parent_session_id(p)
    return p.parent.parent.parent / (pid + SESSION_SUFFIX) if pid else None


def subagents_dir(session: str | Path) -> Path:
    """``<project>/<id>/subagents/`` of a session file."""
    s = Path(session)
    return s.parent / session_stem(s) / SUBAGENTS


def session_folder(session: str | Path, name: str | None = None) -> Path:
    """``<project>/<id>/`` of a session file, or of a subagent transcript (its
    parent's folder). ``name`` replaces the id from the file name (e.g. one
    made safe, or a sessionId when the file has no such name)."""
    p = Path(session)
    if p.parent.name == SUBAGENTS:
        return p.parent.parent
    return p.parent / (name if name is not None else session_stem(p))


def session_path(path: str | Path) -> Path:
    """The session file as named (``.pending`` taken off), links not followed."""
    p = Path(path).expanduser()
    if is_pending_name(p.name):
        p = p.with_name(p.name[: -len(PENDING_SUFFIX)])
    return p


def original_path(path: str | Path) -> Path:
    """The real session file (a symlink followed), for reading; a command
    that writes takes ``own_session_path``."""
    return Path(os.path.realpath(session_path(path)))


def own_session_path(path: str | Path) -> Path:
    """``original_path`` for a command that writes beside the session (a
    pending copy, backups, the journal): SurgeryError when the path named
    is a link whose real file lives in another folder (txdb writes only in
    a session's own folder; a link planted in the tree must not move that).
    A link within the same folder, and the target named itself, pass."""
    named = session_path(path)
    real = Path(os.path.realpath(named))
    if real.parent != Path(os.path.realpath(named.parent)):
        raise SurgeryError(f"{named} is a symlink to {real}, in another folder: txdb writes only in a session's "
                           f"own folder, never through a link out of it; name {real} to work on it there")
    return real


def working_file(path: str | Path) -> Path:
    """The file the next surgery pass edits, so the one whose chain
    positions ``--from/--to/--pos`` name: the pending copy when there is
    one, else the session file. Commands that show positions read it too.
    Only a regular file there counts (never a link, a FIFO, a folder: the
    engine refuses those)."""
    p = pending_of(original_path(path))
    try:
        return p if stat.S_ISREG(os.lstat(p).st_mode) else original_path(path)
    except OSError:
        return original_path(path)


def is_session_path(path: str | Path, links: bool = True) -> bool:
    """Whether discovery would call the file at ``path`` a session: a
    ``.jsonl`` name outside any ``tool-results`` folder and not a side file
    of a session's folder (:func:`is_side_file`), and, for a symlink,
    the file it points at too (a link named ``X.jsonl`` to a backup is a
    backup). Backups, pending copies and every other file are read directly
    when asked for, never catalogued. ``links=False``: by the path alone (a
    gone file's catalogued path, whatever stands there now)."""
    p = Path(path)
    if not _named_like_session(p):
        return False
    return not links or not os.path.islink(p) or _named_like_session(Path(os.path.realpath(p)))


def _named_like_session(p: Path) -> bool:
    return is_session_name(p.name) and not SKIP_DIRS.intersection(p.parent.parts) and not is_side_file(p)
