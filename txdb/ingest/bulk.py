"""Refresh the catalog at a path; a catalog that does not exist yet is
built in bulk.

A first refresh reads every session a user has, often gigabytes, into an
empty catalog. Nothing in that catalog exists anywhere else yet, so it is
built in a scratch file beside the catalog:
- without a journal: each page is written once, not once to the WAL and
  again to the database;
- the parse worker fills the full-text index in a sidecar, adopted at the
  end (txdb.ingest.fts), instead of this process indexing file by file;
- then it is switched to WAL, synced, and published with a hard link, which
  never replaces a catalog another process published first (that one is
  then refreshed instead).
If the build fails or is interrupted, the scratch file is removed (if the
process is killed, by the next run): no catalog is half-written, and the
next refresh starts again.
"""

from __future__ import annotations

import glob
import os
import sqlite3
import threading
from pathlib import Path
from typing import Callable

from .. import db
from . import fts
from .store import RefreshStats, refresh



def refresh_db(path: str | Path, roots: list[Path], prune: bool = False,
               progress: Callable[[int, int], None] | None = None,
               parallel: bool | None = None) -> RefreshStats:
    """Refresh the catalog at ``path``, building it in bulk if it is new."""
    path = Path(path)
    if not path.exists():
        stats = build(path, roots, progress=progress, parallel=parallel)
        if stats is not None:
            return stats
    conn = db.connect(path)
    try:
        return refresh(conn, roots, prune=prune, progress=progress, parallel=parallel)
    finally:
        conn.close()


def _scratch_name(path: Path) -> str:
    return f".{path.name}.building-"


def build(path: Path, roots: list[Path], progress=None, parallel: bool | None = None) -> RefreshStats | None:
    """Build a new catalog at ``path`` from ``roots``. Returns None, having
    built nothing, if another process published a catalog there first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_scratch(path)
    scratch = path.with_name(f"{_scratch_name(path)}{os.getpid()}")
    _unlink(scratch)
    sidecar = scratch.with_name(scratch.name + "-fts")
    try:
        conn = sqlite3.connect(str(scratch), isolation_level=None)
        try:
            os.chmod(scratch, 0o600)
            # A small page cache: without a journal each commit writes its
            # pages out anyway, and a large one only costs fresh memory
            # (64 MB of it made a first build 10-15% slower).
            for pragma in ("journal_mode = OFF", "synchronous = OFF", "locking_mode = EXCLUSIVE",
                           "temp_store = MEMORY", "cache_size = -4096"):
                conn.execute(f"PRAGMA {pragma}")
            db.register_functions(conn)
            db.migrate(conn)
            db.ensure_views(conn)
            deferred = _defer(conn)
            stats = refresh(conn, roots, progress=progress, parallel=parallel,
                            fts_sidecar=(str(sidecar), fts.index_sql(conn)))
            # Start writing the rows to disk while the build ends.
            early_sync = threading.Thread(target=_fsync, args=(scratch,), daemon=True)
            early_sync.start()
            for sql in deferred:
                conn.execute(sql)
        finally:
            conn.close()
        # A fresh connection, which has not read the full-text index yet.
        conn = sqlite3.connect(str(scratch), isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous = OFF")  # synced once, before publishing
            fts.adopt_or_build(conn, sidecar)
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
        early_sync.join()
        _fsync(scratch)
        try:
            os.link(scratch, path)  # publish; never over another catalog
        except FileExistsError:
            return None
        except OSError:  # a file system without hard links: rename, unless one appeared
            if path.exists():
                return None
            os.replace(scratch, path)
        _fsync_dir(path.parent)
        return stats
    finally:
        _unlink(scratch)
        _unlink(sidecar)


def _defer(conn: sqlite3.Connection) -> list[str]:
    """Drop the triggers (they only keep the full-text index current, and
    it is filled once at the end); return the SQL that recreates them."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in rows:
        conn.execute(f'DROP TRIGGER "{name}"')
    return [sql for _, sql in rows]


def _remove_stale_scratch(path: Path) -> None:
    """Scratch files (and full-text sidecars) of builds whose process is gone."""
    prefix = str(path.with_name(_scratch_name(path)))
    for name in glob.glob(glob.escape(prefix) + "*"):
        pid = name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            _unlink(Path(name))


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


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
