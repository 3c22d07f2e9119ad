"""Keep the catalog current while Claude Code writes (`refresh --watch`,
`serve --watch`).

The file system tells us what changed (``watchfiles``: inotify, FSEvents or
ReadDirectoryChanges, polling only where none works); each changed session
file goes through the same one-file refresh as everything else
(``refresh_path``: a grown file is read from its cursor, a last line without
its newline waits for it, each file commits in one transaction). What one
file's event cannot say — a new folder whose files may predate its watch, a
deleted file or folder — is settled by a full ``refresh`` of the roots, which
marks vanished files gone (or prunes them) exactly as `txdb refresh` does.

The watch starts before the first full refresh, so nothing written between
that refresh and the first event is missed.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from txdb.catalog import db
from txdb.errors import NothingToWatch
from txdb.model.paths import is_session_path
from txdb.model.paths import NOT_TEXT_PATH, SESSION_SUFFIX, SKIP_DIRS
from txdb.catalog.ingest.store import refresh, refresh_path

# Changes are handed over after this long without a new one (ms) ...
QUIET_MS = 50
# ... or after this long in any case, under a steady stream of writes (ms):
# well inside the second a change may take to reach the catalog.
MAX_WAIT_MS = 300
# How long the watcher waits for a change before looking at its stop event
# again and retrying what failed (ms).
IDLE_MS = 500
# Another writer held the catalog past the busy timeout (a long first build,
# an apply): try again; any other SQLite condition (a full disk) ends the watch.
BUSY = "database is locked"
# How watchfiles names a changed path that is not UTF-8 (its watch ends there).
UNDECODABLE = "Unable to decode path"


@dataclass(slots=True)
class WatchEvent:
    """What the watcher did: ``kind`` is ``watching`` (ready; ``paths`` are
    the roots), ``file`` (one file refreshed: ``status`` new, grown,
    rewritten or unchanged), ``rescan`` (a full refresh after a folder
    appeared or something was deleted; ``status`` is its summary) or
    ``retry`` (the catalog was busy: ``status`` says why; tried again soon)
    or ``skipped`` (a file could not be read: tried again on its next change)."""

    kind: str
    paths: list[str] = field(default_factory=list)
    status: str = ""
    seconds: float = 0.0
    changed: bool = True  # a rescan that found nothing new says False


def _root_of(path: str, roots: list[str]) -> str | None:
    for r in roots:
        if path.startswith(r.rstrip(os.sep) + os.sep):
            return r
    return None


def _in_skipped_folder(path: str) -> bool:
    return bool(SKIP_DIRS.intersection(Path(path).parent.parts))


class _Filter:
    """Which changes matter: session files, and folders that appear or
    go (a deleted path that is not a session file may have been a folder;
    copies such as ``.jsonl.pending``, ``.bak`` and temp files are not)."""

    def __call__(self, change, path: str) -> bool:
        import watchfiles

        if is_session_path(path):
            return True
        if _in_skipped_folder(path) or SESSION_SUFFIX in os.path.basename(path):
            return False
        if change == watchfiles.Change.added:
            return os.path.isdir(path)
        return change == watchfiles.Change.deleted


def watched_roots(roots: list[Path]) -> list[Path]:
    """The roots that exist (a watch needs a folder); NothingToWatch if none does."""
    existing = [Path(r) for r in roots if Path(r).is_dir()]
    if not existing:
        raise NothingToWatch(
            "nothing to watch: no sessions folder at " + ", ".join(str(r) for r in roots)
            + " (set --root or CLAUDE_CONFIG_DIR)"
        )
    return existing


def watch(db_path: str | Path, roots: list[Path], prune: bool = False,
          report: Callable[[WatchEvent], None] | None = None,
          stop: threading.Event | None = None) -> None:
    """Refresh the catalog at ``db_path`` from ``roots`` as their files
    change, until ``stop`` is set (or Ctrl-C: KeyboardInterrupt, raised
    between two files' transactions or rolling back the one in progress).

    Opens its own connection, so it can run in a thread of its own beside
    readers of the catalog (WAL: they see each file once it commits).
    """
    import watchfiles

    report = report or (lambda event: None)
    existing = watched_roots(roots)
    root_strs = [str(r) for r in existing]
    conn = db.connect(db_path)
    try:
        dirty: set[str] = set()
        gone: list[int] = []  # files gone at the last rescan, to tell a new deletion
        rescan = True  # the first one catches what changed before the watch started
        ready = False
        while True:
            try:
                for changes in watchfiles.watch(
                    *existing, watch_filter=_Filter(), debounce=MAX_WAIT_MS, step=QUIET_MS,
                    rust_timeout=IDLE_MS, yield_on_timeout=True, stop_event=stop, raise_interrupt=True,
                    ignore_permission_denied=True,
                ):
                    for change, path in changes:
                        if is_session_path(path) and change != watchfiles.Change.deleted:
                            dirty.add(path)
                        else:
                            rescan = True
                    if rescan:
                        rescan = not _rescan(conn, existing, prune, report, gone)
                        if not rescan:
                            dirty.clear()  # the rescan read them all
                    for path in sorted(dirty):
                        outcome = _refresh_one(conn, path, _root_of(path, root_strs), report)
                        if outcome == "done":
                            dirty.discard(path)
                        elif outcome == "vanished":
                            dirty.discard(path)
                            rescan = True  # deleted meanwhile: marked gone by the next rescan
                    if not ready and not rescan:
                        ready = True
                        report(WatchEvent("watching", root_strs))
                return  # stopped
            except RuntimeError as e:  # watchfiles: a path it cannot decode (not UTF-8) ends its watch
                if not str(e).startswith(UNDECODABLE):
                    raise
                named = str(e)[len(UNDECODABLE):].rsplit(" to string", 1)[0].strip().strip('"')
                report(WatchEvent("skipped", [named], NOT_TEXT_PATH))
                rescan = True  # watched again from a new watch; what changed meanwhile, by a rescan
    finally:
        conn.close()


def _rescan(conn, roots: list[Path], prune: bool, report, gone: list[int]) -> bool:
    t0 = time.perf_counter()
    try:
        stats = refresh(conn, roots, prune=prune)
    except sqlite3.OperationalError as e:
        if str(e) != BUSY:
            raise
        report(WatchEvent("retry", [str(r) for r in roots], f"SQLite: {e}"))
        return False
    changed = bool(stats.new + stats.grown + stats.rewritten + stats.pruned) or (bool(gone) and stats.gone > gone[-1])
    gone[:] = [stats.gone]
    report(WatchEvent("rescan", [str(r) for r in roots], stats.summary(), time.perf_counter() - t0, changed))
    return True


def _refresh_one(conn, path: str, root: str | None, report) -> str:
    """``done`` (or skipped), ``vanished`` or ``retry``."""
    t0 = time.perf_counter()
    try:
        status = refresh_path(conn, path, root=root)
    except FileNotFoundError:
        return "vanished"
    except sqlite3.OperationalError as e:
        if str(e) != BUSY:
            raise
        report(WatchEvent("retry", [path], f"SQLite: {e}"))
        return "retry"
    except OSError as e:  # unreadable now: its next change tries again
        report(WatchEvent("skipped", [path], e.strerror or type(e).__name__))
        return "done"
    report(WatchEvent("file", [path], status, time.perf_counter() - t0))
    return "done"
