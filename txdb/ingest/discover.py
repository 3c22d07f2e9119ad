"""Find session files under the projects roots."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..regular import NotRegularFile

SKIP_DIRS = frozenset({"tool-results"})


@dataclass(slots=True)
class Found:
    path: str
    root: str
    project: str | None
    kind: str  # 'session' or 'subagent'
    parent_session_id: str | None  # from the layout, for subagents
    stat: os.stat_result


def classify(path: Path, root: Path | None = None) -> tuple[str | None, str, str | None]:
    """(project folder, kind, parent session id from the layout) of a session path."""
    parts = path.parts
    project = None
    if root is not None:
        try:
            rel = path.relative_to(root).parts
            project = rel[0] if len(rel) > 1 else None
        except ValueError:
            project = None
    if project is None and len(parts) >= 2:
        project = parts[-2]
    stem = path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.stem
    if len(parts) >= 3 and parts[-2] == "subagents":
        parent = parts[-3]
        if root is None and len(parts) >= 4:
            project = parts[-4]
        return project, "subagent", parent
    if stem.startswith("agent-"):
        return project, "subagent", None
    return project, "session", None


def is_session_file(name: str) -> bool:
    # .pending and .bak copies end differently, so they never match.
    return name.endswith(".jsonl")


def is_session_path(path: str | Path) -> bool:
    """Whether discovery would call the file at ``path`` a session: a
    ``.jsonl`` name outside any ``tool-results`` folder, and, for a symlink,
    the file it points at too (a link named ``X.jsonl`` to a backup is a
    backup). Backups, pending copies and every other file are read directly
    when asked for, never catalogued."""
    p = Path(path)
    if not _named_like_session(p):
        return False
    return not os.path.islink(p) or _named_like_session(Path(os.path.realpath(p)))


def _named_like_session(p: Path) -> bool:
    return is_session_file(p.name) and not SKIP_DIRS.intersection(p.parent.parts)


def reached(path: str | Path, root: str | Path) -> bool:
    """Whether :func:`discover` walking ``root`` lists the file at ``path``:
    a session path (:func:`is_session_path`) under ``root`` with no
    symlinked or ``tool-results`` folder between the two. For a caller that
    looks a file up by its place (the hook's subagent transcripts) rather
    than walking the tree."""
    p, top = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    try:
        rel = p.relative_to(top).parts
    except ValueError:
        return False
    folder = top
    for name in rel[:-1]:
        folder = folder / name
        if name in SKIP_DIRS or os.path.islink(folder) or not os.path.isdir(folder):
            return False
    return bool(rel) and is_session_path(p) and os.path.isfile(p)


def session_stem(path: str | Path) -> str:
    """The session's name in a session file's name, also for its copies
    (``X.jsonl.pending``, ``X.jsonl.bak.2`` -> ``X``)."""
    name = Path(path).name
    at = name.rfind(".jsonl")
    return name[:at] if at > 0 else name


@dataclass(slots=True)
class Unreadable:
    path: str
    error: str

    def as_dict(self) -> dict:
        return {"path": self.path, "error": self.error}


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def discover(roots: list[Path], unreadable: list[Unreadable] | None = None) -> list[Found]:
    """Every session file under ``roots``: recursive, skipping tool-results
    folders and symlinked folders (symlinked files still count). A file
    reached by two paths (a symlink beside its target) is listed once, under
    the path that is not a link. Folders that cannot be listed and files
    that cannot be looked at are added to ``unreadable``."""
    found: list[Found] = []
    seen: set[str] = set()  # a root given twice, or inside another, lists its files once
    by_file: dict[tuple[int, int], int] = {}  # (device, inode) -> index in found
    for root in roots:
        if not root.is_dir():
            continue
        stack = [str(root)]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except FileNotFoundError:
                continue  # vanished meanwhile
            except OSError as e:
                if unreadable is not None:
                    unreadable.append(Unreadable(folder, _reason(e)))
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in SKIP_DIRS:
                            stack.append(entry.path)
                        continue
                    if not is_session_file(entry.name):
                        continue
                    if entry.is_symlink() and not is_session_path(entry.path):
                        continue  # a link to a backup, a pending copy, ...
                    st = entry.stat(follow_symlinks=True)
                    if not stat.S_ISREG(st.st_mode):
                        # A FIFO named like a session would block a reader: named, never opened.
                        if unreadable is not None and not stat.S_ISDIR(st.st_mode):
                            unreadable.append(Unreadable(entry.path, NotRegularFile(entry.path, st.st_mode).strerror))
                        continue
                except FileNotFoundError:
                    continue  # vanished, or a link to nothing
                except OSError as e:
                    if unreadable is not None:
                        unreadable.append(Unreadable(entry.path, _reason(e)))
                    continue
                if entry.path in seen:
                    continue
                seen.add(entry.path)
                path = Path(entry.path)
                project, kind, parent = classify(path, root)
                f = Found(entry.path, str(root), project, kind, parent, st)
                key = (st.st_dev, st.st_ino)
                if key in by_file:
                    if not entry.is_symlink():
                        found[by_file[key]] = f  # the real path wins over a link to it
                    continue
                by_file[key] = len(found)
                found.append(f)
    return found
