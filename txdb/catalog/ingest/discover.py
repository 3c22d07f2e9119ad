"""Find session files under the projects roots."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from txdb.model.paths import (META_SUFFIX, NOT_TEXT_PATH, SESSION_DIR, SESSION_SUFFIX, SIDECAR_DIRS, SKIP_DIRS, SUBAGENT_PREFIX,
    SUBAGENTS, is_text_path, shown_path, is_session_name, is_session_path, is_side_file, session_folder)
from txdb.model.regular import NotRegularFile


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
    stem = path.name[: -len(SESSION_SUFFIX)] if is_session_name(path.name) else path.stem
    if len(parts) >= 3 and parts[-2] == SUBAGENTS:
        parent = parts[-3]
        if root is None and len(parts) >= 4:
            project = parts[-4]
        return project, "subagent", parent
    if stem.startswith(SUBAGENT_PREFIX):
        return project, "subagent", None
    return project, "session", None


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


@dataclass(slots=True)
class FoundSidecar:
    path: str
    root: str
    project: str | None
    session_id: str  # the session folder's name
    rel: str  # path inside the session folder
    stat: os.stat_result


def sidecar_place(rel: tuple[str, ...]) -> tuple[str | None, str, str] | None:
    """(project, session id, path inside the session folder) of a file at
    ``rel`` (its path's parts under a root) that is a session's sidecar:
    ``<project>/<sessionId>/tool-results/*``, ``.../persisted/**`` or
    ``.../subagents/*.meta.json``, and any other file in a folder named as
    a session (``<project>/<uuid>/...``: ``resume-head.jsonl``,
    ``workflows/``, ``remote-agents/``, which Claude Code's cleanup deletes
    with it) but its subagent transcripts; None for any other file."""
    for i in range(1, len(rel) - 1):
        if rel[i] in SIDECAR_DIRS or (rel[i] == SUBAGENTS and i == len(rel) - 2
                                       and rel[-1].endswith(META_SUFFIX)):
            project = rel[i - 2] if i >= 2 else None
            return project, rel[i - 1], "/".join(rel[i:])
        if SESSION_DIR.fullmatch(rel[i]):
            if rel[i + 1] == SUBAGENTS and i == len(rel) - 3 and rel[-1].endswith(SESSION_SUFFIX):
                return None  # a subagent transcript
            return rel[i - 1], rel[i], "/".join(rel[i + 1:])
    return None


def session_sidecars(root: str | Path, session_path: str | Path) -> list[FoundSidecar]:
    """The sidecars (``sidecar_place``) in the folder of the session whose
    file (or subagent transcript) is at ``session_path``, found under
    ``root``; links are never followed."""
    folder = session_folder(session_path)
    out: list[FoundSidecar] = []
    for dirpath, dirs, names in os.walk(folder):
        try:
            rel = Path(dirpath).relative_to(root).parts
        except ValueError:
            return []
        if not _may_hold_sidecars(rel):
            continue
        for name in names:
            place = sidecar_place((*rel, name))
            if place is None:
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append(FoundSidecar(path, str(root), *place, st))
    return out


def _may_hold_sidecars(rel: tuple[str, ...]) -> bool:
    """Whether files of the folder at ``rel`` (under a root) can be sidecars:
    the folder is in a sidecar folder or a folder named as a session, or is
    a ``subagents`` folder."""
    return ((len(rel) >= 2 and rel[-1] == SUBAGENTS) or any(p in SIDECAR_DIRS for p in rel[1:])
            or any(SESSION_DIR.fullmatch(p) for p in rel[1:]))


@dataclass(slots=True)
class Unreadable:
    path: str
    error: str

    def as_dict(self) -> dict:
        return {"path": self.path, "error": self.error}


@dataclass(slots=True)
class Linked:
    """A symbolic link to a folder under a root: never followed, so nothing under it is listed."""
    path: str
    root: str
    target: str  # where the link leads (os.path.realpath), named for the user

    def as_dict(self) -> dict:
        give = self.root_to_give()
        return {"path": shown_path(self.path), "root": shown_path(self.root), "target": shown_path(self.target),
                "root_to_give": None if give is None else shown_path(give)}

    def root_to_give(self) -> str | None:
        """The folder holding the target, to give as a ``--root`` of its own
        so that refresh reads it; None where that would be wrong: the target
        is the root, under it (read already) or above it, or its folder is a
        file system's root (every file under it a project's)."""
        parent, root = os.path.dirname(self.target), os.path.realpath(self.root)
        if parent == os.path.dirname(parent):
            return None
        for a, b in ((self.target, root), (root, self.target)):
            if a == b or a.startswith(b.rstrip(os.sep) + os.sep):
                return None
        return parent


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _links_to_folder(entry: os.DirEntry) -> bool:
    """Whether ``entry`` is a symbolic link to a folder (one that cannot be looked at through: no)."""
    try:
        return entry.is_symlink() and entry.is_dir()
    except OSError:
        return False


def discover(roots: list[Path], unreadable: list[Unreadable] | None = None,
             sidecars: list[FoundSidecar] | None = None, not_text: list[Found] | None = None,
             linked: list[Linked] | None = None) -> list[Found]:
    """Every session file under ``roots``: recursive, skipping tool-results
    folders and symlinked folders (symlinked files still count). A file
    reached by two paths (a symlink beside its target) is listed once, under
    the path that is not a link. Folders that cannot be listed and files
    that cannot be looked at are added to ``unreadable``. With ``sidecars``,
    the regular files ``sidecar_place`` names (never through a link) are
    added to it. With ``not_text``, each session file whose path is not
    text (never catalogued, also named in ``unreadable``) is added to it as
    found (its path as the OS gives it), for a caller that must still
    account for it (doctor: Claude Code's cleanup deletes it all the same).
    With ``linked``, each symbolic link to a folder met on the way (a
    project folder moved to another disk and linked back, say), whose files
    are not listed, is added to it once, for a caller that says so."""
    found: list[Found] = []
    seen: set[str] = set()  # a root given twice, or inside another, lists its files once
    by_file: dict[tuple[int, int], int] = {}  # (device, inode) -> index in found
    for root in roots:
        if not root.is_dir():
            continue
        stack: list[tuple[str, tuple[str, ...]]] = [(str(root), ())]
        while stack:
            folder, rel = stack.pop()
            in_skipped = not SKIP_DIRS.isdisjoint(rel)
            sidecar_folder = sidecars is not None and _may_hold_sidecars(rel)
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
                    if linked is not None and _links_to_folder(entry):
                        if entry.path not in seen:
                            seen.add(entry.path)
                            linked.append(Linked(entry.path, str(root), os.path.realpath(entry.path)))
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in SKIP_DIRS or sidecars is not None:
                            stack.append((entry.path, (*rel, entry.name)))
                        continue
                    if sidecar_folder and not entry.is_symlink():
                        place = sidecar_place((*rel, entry.name))
                        if place is not None and not is_text_path(entry.path):
                            if unreadable is not None:
                                unreadable.append(Unreadable(shown_path(entry.path), NOT_TEXT_PATH))
                            continue
                        if place is not None:
                            st = entry.stat(follow_symlinks=False)
                            if stat.S_ISREG(st.st_mode):
                                sidecars.append(FoundSidecar(entry.path, str(root), *place, st))
                            continue
                    if in_skipped or not is_session_name(entry.name) or is_side_file(entry.path):
                        continue
                    if not is_text_path(entry.path):
                        if unreadable is not None:
                            unreadable.append(Unreadable(shown_path(entry.path), NOT_TEXT_PATH))
                        if not_text is not None:
                            st = entry.stat(follow_symlinks=False)
                            if stat.S_ISREG(st.st_mode):
                                not_text.append(Found(entry.path, str(root), *classify(Path(entry.path), root), st))
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
    if linked is not None:
        linked.sort(key=lambda link: link.path)
    return found
