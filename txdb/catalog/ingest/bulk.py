"""Refresh the catalog at a path; a catalog that does not exist yet is
built in bulk.

A first refresh reads every session a user has, often gigabytes, into an
empty catalog. Nothing in that catalog exists anywhere else yet, so it is
built in a scratch file beside the catalog (``.<name>.building-<pid>``):
- by the same refresh as any catalog (txdb.catalog.ingest.store), file by file,
  except that the full-text index is built once at the end, in one
  statement (far cheaper than one per file);
- with a rollback journal but no syncs: nearly every page is new, and new
  pages are not journaled, so this costs almost nothing over no journal at
  all, while each file still commits whole;
- then it is switched to WAL, synced, and published with a hard link, which
  never replaces a catalog another process published first (that one is
  then refreshed instead).
There is never a half-built catalog at the path. A build that fails, is
interrupted or is killed leaves its scratch file, consistent at its last
whole file, and the next refresh resumes it.
"""

from __future__ import annotations

import glob
import os
import sqlite3
from pathlib import Path
from typing import Callable

from txdb.catalog import db
from txdb.model.durability import fsync_dir
from txdb.catalog.ingest.store import FTS_BUILD, RefreshStats, refresh


def refresh_db(path: str | Path, roots: list[Path], prune: bool = False,
               progress: Callable[[int, int], None] | None = None, prices: bool = True) -> RefreshStats:
    """Refresh the catalog at ``path``, building it in bulk if it is new.
    ``prices=False``: models new to the catalog are priced by the next
    ``db.connect`` instead (a one-shot refresh never reads a price)."""
    path = Path(path)
    if not path.exists():
        stats = build(path, roots, progress=progress, prices=prices)
        if stats is not None:
            return stats
    conn = db.connect(path, prices=prices)
    try:
        return refresh(conn, roots, prune=prune, progress=progress, prices=prices)
    finally:
        conn.close()


def _scratch_name(path: Path) -> str:
    return f".{path.name}.building-"


def build(path: Path, roots: list[Path], progress=None, prices: bool = True) -> RefreshStats | None:
    """Build a new catalog at ``path`` from ``roots``, resuming the scratch
    file of a build that was killed or failed. Returns None, publishing
    nothing, if another process published a catalog there first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f"{_scratch_name(path)}{os.getpid()}")
    _claim_stale_scratch(path, scratch)
    published = False
    try:
        db.create_private(scratch)
        conn = sqlite3.connect(str(scratch), isolation_level=None)
        try:
            # A rollback journal without syncs: nearly free here (new pages
            # are not journaled), and a killed build can be resumed. A small
            # page cache: each commit writes its pages out anyway, and fresh
            # memory costs more (64 MB of it made a build 10-15% slower).
            for pragma in ("journal_mode = TRUNCATE", "synchronous = OFF", "locking_mode = EXCLUSIVE",
                           "temp_store = MEMORY", "cache_size = -4096"):
                conn.execute(f"PRAGMA {pragma}")
            db.register_functions(conn)
            db.migrate(conn)
            db.ensure_views(conn)
            # Built under today's rules: recorded now, so the first open re-derives nothing.
            db.rederive(conn)
            stats = refresh(conn, roots, progress=progress, index_text=False, prices=prices)
            with db.transaction(conn):  # all of it, a resumed build's earlier files too
                conn.execute("INSERT INTO blocks_fts (blocks_fts) VALUES ('delete-all')")
                conn.execute(FTS_BUILD)
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
        _fsync(scratch)
        try:
            os.link(scratch, path)  # publish; never over another catalog
        except FileExistsError:
            return None
        except OSError:  # a file system without hard links: rename, unless one appeared
            if path.exists():
                return None
            os.replace(scratch, path)
        published = True
        fsync_dir(path.parent)
        return stats
    finally:
        if published or path.exists():
            _unlink(scratch)
        # else the scratch stays, consistent at its last file, for the next run to resume


def _claim_stale_scratch(path: Path, scratch: Path) -> bool:
    """Take over the scratch file of a build whose process is gone, if it is
    sound (opening it rolls back the file that build was writing); remove
    the other leftovers. True if ``scratch`` is now such a file."""
    _unlink(scratch)
    prefix = str(path.with_name(_scratch_name(path)))
    claimed = False
    for name in sorted(glob.glob(glob.escape(prefix) + "*")):
        rest = name[len(prefix):]
        pid = rest.split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)) or not os.path.exists(name):
            continue
        if rest == pid and not claimed:  # a scratch catalog, not its journal
            try:
                conn = sqlite3.connect(name, isolation_level=None)
                try:
                    sound = conn.execute("PRAGMA quick_check").fetchone()[0] == "ok" and conn.execute(
                        "SELECT 1 FROM sqlite_master WHERE name = 'files'").fetchone() is not None
                finally:
                    conn.close()
            except sqlite3.Error:
                sound = False
            if sound:
                os.replace(name, scratch)
                claimed = True
                continue
        _unlink(Path(name))
    return claimed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink(p: Path) -> None:
    for name in (p, Path(f"{p}-journal"), Path(f"{p}-wal"), Path(f"{p}-shm")):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass


def _fsync(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
