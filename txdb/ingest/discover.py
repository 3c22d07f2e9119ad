"""Find session files under the projects roots."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

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


def discover(roots: list[Path]) -> list[Found]:
    """Every session file under ``roots``: recursive, skipping tool-results
    folders and symlinked folders (symlinked files still count)."""
    found: list[Found] = []
    seen: set[str] = set()  # a root given twice, or inside another, lists its files once
    for root in roots:
        if not root.is_dir():
            continue
        stack = [str(root)]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in SKIP_DIRS:
                            stack.append(entry.path)
                        continue
                    if not is_session_file(entry.name):
                        continue
                    if not entry.is_file(follow_symlinks=True):
                        continue
                    st = entry.stat(follow_symlinks=True)
                except OSError:
                    continue
                if entry.path in seen:
                    continue
                seen.add(entry.path)
                path = Path(entry.path)
                project, kind, parent = classify(path, root)
                found.append(Found(entry.path, str(root), project, kind, parent, st))
    return found
