"""Give back, from the catalog, a session whose files are gone.

A session's files are rebuilt from what refresh kept: its ``.jsonl`` (and
each subagent transcript's) from its raw lines in offset order (``raw_chunks``), the bytes
between records being line endings; the files in its folder
(``tool-results/``, ``persisted/``, ``subagents/*.meta.json``) from
``sidecars`` and their ``blobs``. Each rebuilt file must hash to the sha256
refresh recorded (``files.sha256``, ``sidecars.sha256``) before anything is
written; a file that cannot be given back whole (an unparsable line, a last
line still being written when it vanished, rows an older txdb kept without
a hash) refuses the restore and is named.

Writing never replaces a file: each goes to a temp file, is fsynced and
linked to its name (``sidecar.write``), with its catalogued mode
(``MODE_KEPT`` of it; 0600 when none), folders 0700; a
failure takes back every file this restore created. A session file still
on disk is refused, and so is another file at a path (other bytes: named
as another file, never as the session still there); ``--to`` writes the
copy into another project folder.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Iterator

from txdb.catalog import sessions as catalog
from txdb.catalog import units
from txdb.catalog.db import connect_readonly, run_query
from txdb.catalog.sqlutil import transaction
from txdb.catalog.ingest.chunks import raw_views
from txdb.errors import AmbiguousSession, NothingMissing, QueryError, RestoreError, SessionNotFound
from txdb.model import sidecar as sidecarmod
from txdb.model.lines import HEAD_BYTES, TAIL_BYTES
from txdb.model.paths import (ARCHIVED_SUFFIX, SESSION_DIR, SESSION_SUFFIX, SKIP_DIRS, SUBAGENT_PREFIX, SUBAGENTS,
    archived_bounds, archived_from, archived_path, is_session_name, session_of_copy, session_stem)


# Of a catalogued mode, what restore gives back: the owner's bits, group and
# others' read and execute; never their write, setuid, setgid or sticky.
MODE_KEPT = 0o755


@dataclass
class Item:
    path: Path      # where it is written
    source: str     # the catalogued path it comes from
    kind: str       # session, subagent, sidecar
    size: int
    sha256: str
    chunks: Callable[[], Iterator[bytes]]  # its bytes, streamed from the catalog (never held whole)
    row_id: int = 0  # its files.id (sidecars.id for a sidecar)
    mode: int | None = None      # as catalogued (None: an older row, written 0600)
    mtime_ns: int | None = None  # as catalogued
    gone: bool = True            # its catalog row is gone (else a live file: left alone when there)
    present: bool = False  # a file is there already and left alone (these very bytes, or the live file)
    mismatch: str = ""     # the error when the bytes written do not hash to sha256
    written: os.stat_result | None = None  # what was written (its fstat before it took its name)

    def __post_init__(self) -> None:
        # as catalogued, if the catalog's figures are sound (a hand may have edited them): else the defaults
        if not (type(self.mode) is int and 0 <= self.mode <= 0o7777):
            self.mode = None
        else:
            self.mode &= MODE_KEPT
        if not (type(self.mtime_ns) is int and 0 <= self.mtime_ns < 1 << 63):
            self.mtime_ns = None

    def as_dict(self) -> dict:
        return {"path": str(self.path), "from": self.source, "kind": self.kind, "bytes": self.size,
                "sha256": self.sha256, "present": self.present}


@dataclass
class Plan:
    session_id: str
    file_id: int
    folder: Path                 # the project folder it is written into
    items: list[Item] = field(default_factory=list)
    copy: bool = False           # written under --to: a copy, not the catalogued files
    failed: str | None = None    # why writing it failed (``restore(each=True)``): nothing of it written
    stem: str = ""               # the session file's name without .jsonl (its folder's name)
    root: Path | None = None     # in place: the projects folder ``folder`` is a project folder of

    def as_dict(self) -> dict:
        return {"session_id": self.session_id, "folder": str(self.folder),
                "files": [i.as_dict() for i in self.items]}

    @property
    def todo(self) -> list[Item]:
        return [i for i in self.items if not i.present]


NEWLINES = (b"\n", b"\r\n")  # the line endings a rebuilt file is tried with, in order
CHUNK = 1 << 20  # bytes handed to the writer at a time (a rebuilt file, an inflated sidecar)
STREAM_CACHE_KIB = 2048  # the page cache while a file is rebuilt: each page is read once


@contextmanager
def _small_cache(conn: sqlite3.Connection) -> Iterator[None]:
    """A small page cache while a whole file's rows are read once (the
    pages of a 100 MB session's chunks would otherwise stay cached: 6 MB
    more peak memory for no reuse); the connection's own size after."""
    size = conn.execute("PRAGMA cache_size").fetchone()[0]
    smaller = size < -STREAM_CACHE_KIB or size > 0
    if smaller:
        conn.execute(f"PRAGMA cache_size = -{STREAM_CACHE_KIB}")
    try:
        yield
    finally:
        if smaller:
            try:
                conn.execute(f"PRAGMA cache_size = {int(size)}")
            except sqlite3.ProgrammingError:
                pass  # a stream dropped after its connection was closed: nothing left to restore


def rebuild_chunks(conn: sqlite3.Connection, file_id: int, newline: bytes = b"\n", start: int = 0,
                   chunk: int = CHUNK) -> Iterator[bytes]:
    """A catalogued file's bytes from its records, streamed in pieces of
    about ``chunk`` bytes: each record's raw JSON at its offset, the gaps
    between records (and after the last, up to the file's catalogued size)
    filled with ``newline`` (``\\n`` where a gap is not a whole number of
    them). From ``start`` (a record's offset) on. The caller checks the
    result against ``files.sha256``."""
    with _small_cache(conn):
        yield from _rebuild_chunks(conn, file_id, newline, start, chunk)


def _rebuild_chunks(conn: sqlite3.Connection, file_id: int, newline: bytes, start: int,
                    chunk: int) -> Iterator[bytes]:
    size, = conn.execute("SELECT size FROM files WHERE id = ?", (file_id,)).fetchone()
    at = start
    pieces: list[bytes | memoryview] = []
    held = 0
    n = len(newline)
    if type(size) is not int:
        raise RestoreError(f"file {file_id}: its catalogued size is not a number ({size!r})")
    for records in raw_views(conn, file_id, start):  # a chunk at a time: a call per chunk, not per record
        was = at
        for offset, raw in records:
            gap = offset - at
            if offset + len(raw) > size:
                raise RestoreError(f"file {file_id}: a record at byte {offset} ends past its catalogued size")
            if gap:
                if gap < 0:
                    raise RestoreError(f"file {file_id}: records overlap at byte {offset}")
                if gap > chunk:  # never one piece of more than ``chunk`` bytes
                    yield b"".join(pieces)
                    pieces.clear()
                    yield from _gap(gap, newline, chunk)
                else:
                    pieces.append(newline if gap == n else newline * (gap // n) if gap % n == 0 else b"\n" * gap)
            pieces.append(raw)
            at = offset + len(raw)
        held += at - was
        if held >= chunk:
            yield b"".join(pieces)
            pieces.clear()
            held = 0
    if pieces:
        yield b"".join(pieces)
    yield from _gap(max(0, size - at), newline, chunk)


def _gap(gap: int, newline: bytes, chunk: int) -> Iterator[bytes]:
    """``gap`` bytes of line endings (``\\n`` where ``gap`` is not a whole
    number of ``newline``), in pieces of at most about ``chunk`` bytes."""
    n = len(newline) if gap % len(newline) == 0 else 1
    unit = newline if n == len(newline) else b"\n"
    whole = max(1, chunk // n)
    while gap > 0:
        count = min(gap // n, whole)
        yield unit * count
        gap -= count * n


def rebuild(conn: sqlite3.Connection, file_id: int, newline: bytes = b"\n") -> bytes:
    """``rebuild_chunks`` joined (a small file, or a test)."""
    return b"".join(rebuild_chunks(conn, file_id, newline))


def _digest(chunks: Iterable[bytes]) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    for piece in chunks:
        h.update(piece)
        n += len(piece)
    return h.hexdigest(), n


def whole_newline(conn: sqlite3.Connection, file_id: int, sha256: str) -> bytes | None:
    """The line ending with which the rebuilt file hashes to ``sha256``
    (streamed: nothing held whole), else None."""
    for newline in NEWLINES:
        if _digest(rebuild_chunks(conn, file_id, newline))[0] == sha256:
            return newline
    return None


def likely_newline(conn: sqlite3.Connection, file_id: int) -> bytes | None:
    """The one line ending whose rebuild of the file's first and last bytes
    hashes to the ``head_sha`` and ``tail_sha`` refresh kept (a few kB
    read, not the file); None when neither or both do. Only a guess: the
    whole file's sha256 is checked as it is written."""
    row = conn.execute("SELECT head_sha, tail_sha, cursor FROM files WHERE id = ?", (file_id,)).fetchone()
    if row is None or None in row:
        return None
    head_sha, tail_sha, cursor = row
    tail_from = max(0, cursor - TAIL_BYTES)
    start, = conn.execute("SELECT coalesce(max(offset), 0) FROM records WHERE file_id = ? AND offset <= ?",
                          (file_id, tail_from)).fetchone()
    fits = []
    for newline in NEWLINES:
        head = b""
        for piece in rebuild_chunks(conn, file_id, newline, chunk=HEAD_BYTES):
            head += piece
            if len(head) >= HEAD_BYTES:
                break
        tail = _span(rebuild_chunks(conn, file_id, newline, start, chunk=TAIL_BYTES), start, tail_from, cursor)
        if (hashlib.sha256(head[:min(cursor, HEAD_BYTES)]).hexdigest() == head_sha
                and hashlib.sha256(tail).hexdigest() == tail_sha):
            fits.append(newline)
    if len(fits) == 2 and not _even_gap(conn, file_id):
        return NEWLINES[0]  # both rebuild the same bytes: no second pass over the file to choose
    return fits[0] if len(fits) == 1 else None


def _span(chunks: Iterator[bytes], at: int, lo: int, hi: int) -> bytes:
    """Bytes ``lo`` to ``hi`` of a file streamed as ``chunks`` from byte
    ``at``: only those kept, the stream left at ``hi`` (never read to its
    end, which a catalogued size may put gigabytes away)."""
    out = bytearray()
    try:
        for piece in chunks:
            nxt = at + len(piece)
            if nxt > lo:
                out += piece[max(0, lo - at):max(0, hi - at)]
            at = nxt
            if at >= hi:
                break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return bytes(out)


def _even_gap(conn: sqlite3.Connection, file_id: int) -> bool:
    """Some gap between records (or before the first, or after the last up
    to the file's size) is a whole number of ``\\r\\n``, where the two line
    endings rebuild different bytes; True too when the records' lengths may
    not be their raw bytes' (a line that did not parse as it stands), and
    when the catalog lacks the file's last bytes (a line still being
    written: the whole hash then names it before anything is written)."""
    if conn.execute("SELECT 1 FROM parse_errors WHERE file_id = ? LIMIT 1", (file_id,)).fetchone():
        return True
    if conn.execute("SELECT cursor <> size FROM files WHERE id = ?", (file_id,)).fetchone() != (0,):
        return True
    # Without a parse error each line is one record, its gap at least one byte:
    # the gaps add up to one a line and the last is one byte, so each is one.
    row = conn.execute(
        "SELECT f.size, f.lines, s.record_bytes, (SELECT r.offset + r.length FROM records r WHERE r.file_id = f.id "
        "ORDER BY r.offset DESC LIMIT 1) FROM files f JOIN sessions s ON s.file_id = f.id WHERE f.id = ?",
        (file_id,)).fetchone()
    if row is not None and None not in row and row[2] + row[1] == row[0] and row[0] - row[3] == 1:
        return False
    with _small_cache(conn):
        return conn.execute(
            "SELECT 1 FROM (SELECT offset - coalesce(lag(offset + length) OVER (ORDER BY offset), 0) AS gap "
            "FROM records WHERE file_id = ? UNION ALL SELECT (SELECT size FROM files WHERE id = ?) - "
            "coalesce((SELECT max(offset + length) FROM records WHERE file_id = ?), 0)) "
            "WHERE gap > 0 AND gap % 2 = 0 LIMIT 1", (file_id, file_id, file_id)).fetchone() is not None


def rebuild_whole(conn: sqlite3.Connection, file_id: int, sha256: str) -> bytes | None:
    """The file's bytes when a rebuild hashes to ``sha256``, else None."""
    newline = whole_newline(conn, file_id, sha256)
    return None if newline is None else rebuild(conn, file_id, newline)


ROWS_CHANGED = "the sha256 of its rebuilt bytes differs from the one refresh recorded: its rows changed since"


def _known_gap(conn: sqlite3.Connection, file_id: int) -> str | None:
    """A line the catalog holds no copy of (one that did not parse, a last
    line still being written), found from the catalog alone; else None."""
    bad = conn.execute("SELECT line FROM parse_errors WHERE file_id = ? AND recovered = 0 ORDER BY line LIMIT 1",
                       (file_id,)).fetchone()
    if bad:
        return f"line {bad[0]} did not parse: the catalog has no copy of it"
    size, cursor = conn.execute("SELECT size, cursor FROM files WHERE id = ?", (file_id,)).fetchone()
    if cursor is not None and cursor < size:
        return "its last line was still being written: the catalog has no copy of it"
    return None


def _why_not_whole(conn: sqlite3.Connection, file_id: int) -> str:
    """Why the catalogued lines of a file do not make up the bytes refresh hashed."""
    return _known_gap(conn, file_id) or ROWS_CHANGED


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _inside(rel: str) -> str:
    """A relative path from the catalog, refused if it could leave its folder."""
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or any(part in ("", ".", "..") for part in p.parts) or "\x00" in rel:
        raise RestoreError(f"refusing a catalogued path that leaves its folder: {rel!r}")
    return str(p)


def latest_gone(conn: sqlite3.Connection, file_id: int) -> int:
    """The version of the file at ``file_id``'s path that restore gives
    back: of that file and its gone versions kept aside
    (``paths.archived_path``: another file appeared at its path) of the
    same session (another session's file put at its path is not a version
    of it), the one gone last whose records hold its session, else the one
    gone last; when none is gone, that file (restore refuses: it is in the
    way; prune: it is not gone)."""
    path, session_id = conn.execute("SELECT path, session_id FROM files WHERE id = ?", (file_id,)).fetchone()
    base = archived_from(path) or path
    prefix = base + ARCHIVED_SUFFIX
    row = conn.execute(
        "SELECT f.id FROM files f WHERE f.gone = 1 AND (f.path = ? OR substr(f.path, 1, ?) = ?) "
        "AND f.session_id IS ? "
        "ORDER BY EXISTS (SELECT 1 FROM records r WHERE r.file_id = f.id AND r.session_id = f.session_id) DESC, "
        "f.gone_at DESC, f.id DESC LIMIT 1", (base, len(prefix), prefix, session_id)).fetchone()
    return row[0] if row else file_id


def plan_restore(conn: sqlite3.Connection, file_id: int, to: str | Path | None = None,
                 verify: bool = True, roots: Iterable[str | Path] | None = None) -> Plan:
    """What restoring the session of ``file_id`` writes (nothing written):
    with ``verify``, every file rebuilt, streamed, and checked against its
    sha256 (memory holds one piece at a time); without (a restore about to
    write, which checks each file's sha256 as it writes it and links none
    that differs), only what the catalog tells without reading the lines.
    RestoreError names each file that cannot be given back whole, and each
    target that is in the way. In place, a
    file of the session that is still there as the catalog knows it (the
    live session beside a lone deleted subagent transcript) is left alone;
    a session with nothing missing is refused ("still there"). In place,
    only into a project folder under one of ``roots`` (the projects
    folders; None: any, for a caller that checked), and only files named
    as transcripts are (``_check_names``)."""
    unit = units.unit_of(conn, file_id)
    if unit is None:
        raise SessionNotFound(f"no catalogued file {file_id}")
    if not unit.lone and unit.files[0][0] != file_id and unit.files[0][2] == "session":
        path = conn.execute("SELECT path FROM files WHERE id = ?", (file_id,)).fetchone()[0]
        raise RestoreError(f"{archived_from(path) or path} is a subagent transcript: restore the session it "
                           "belongs to")
    _check_catalogued_paths(unit)
    _check_names(unit)
    src = Path(unit.session_path)
    stem = session_stem(src)
    folder = _copy_folder(to) if to is not None else src.parent
    root = _root_of(src, roots) if to is None and roots is not None else None
    session_id = conn.execute("SELECT session_id FROM files WHERE id = ?", (file_id,)).fetchone()[0]
    plan = Plan(stem if unit.lone else (session_id or stem), file_id, folder, copy=to is not None, stem=stem,
                root=root)
    _check_session_rows(conn, {stem, plan.session_id})

    def target(rel: str) -> Path:
        return folder / _inside(rel)

    files = []
    for fid, p, k, _gone in unit.files:
        here = Path(archived_from(p) or p)
        if k == "session" or here.parent == src.parent:  # the session file, an agent-*.jsonl beside it
            rel = here.name
        elif here.is_relative_to(src.parent / stem):
            rel = f"{stem}/{here.relative_to(src.parent / stem).as_posix()}"
        else:
            raise RestoreError(f"{here} is not in the folder of {src}: the catalog's paths disagree")
        files.append((fid, p, k, rel))
    broken: list[str] = []
    for fid, p, k, rel in files:
        sha, size, mode, mtime, gone = conn.execute(
            "SELECT sha256, size, mode, mtime_ns, gone FROM files WHERE id = ?", (fid,)).fetchone()
        _check_figures(conn, fid, p)
        if to is None and not gone and _regular(target(rel)):
            # the live file, as refresh last saw it there: not this restore's to write
            plan.items.append(Item(target(rel), p, k, size, sha or "", lambda: iter(()), fid, mode, mtime,
                                   False, True))
            continue
        if sha is None:
            broken.append(f"{p} (the catalog has no sha256 of it: it was gone before a refresh could hash it)")
            continue
        newline = (whole_newline(conn, fid, sha) if verify else
                   likely_newline(conn, fid) or whole_newline(conn, fid, sha))
        why = _why_not_whole(conn, fid)  # a blank line is a parse error the gaps give back: known only by hashing
        if newline is None:
            broken.append(f"{p} ({why})")
            continue
        def lines(fid: int = fid, nl: bytes = newline) -> Iterator[bytes]:
            return rebuild_chunks(conn, fid, nl)
        plan.items.append(Item(target(rel), p, k, size, sha, lines,
                               fid, mode, mtime, bool(gone),
                               mismatch=f"cannot give back whole: {p} ({why}); nothing was written"))
    sdir = sidecarmod.session_dir(src)
    for sid, p, rel, sha, size, mode, mtime, gone, stored, held in conn.execute(
            "SELECT sc.id, sc.path, sc.rel, sc.sha256, sc.size, sc.mode, sc.mtime_ns, sc.gone, b.rowid, "
            "length(b.data) FROM sidecars sc LEFT JOIN blobs b ON b.sha256 = sc.sha256 WHERE substr(sc.path, 1, ?) = ? "
            "ORDER BY sc.rel", (len(str(sdir)) + 1, str(sdir) + os.sep)).fetchall() if unit.owns_folder else ():
        at = target(f"{sdir.name}/{rel}")
        if to is None and not gone and _regular(at):
            # a live file of the folder, changed or not since refresh saw it: not this restore's to write
            plan.items.append(Item(at, p, "sidecar", size, sha, lambda: iter(()), sid, mode, mtime, False, True))
            continue
        if stored is not None:
            _figure(p, "size", size, held * ZLIB_MOST + 64, "its stored content inflates to")
        def chunks(b=stored, n=size, p=p) -> Iterator[bytes]:
            return inflate_chunks(conn, b, n, p)
        ok = stored is not None
        if ok and verify:
            try:
                ok = _digest(chunks()) == (sha, size)
            except RestoreError:
                ok = False
        why = f"{p} (its stored content is missing, corrupt or does not match its sha256)"
        if not ok:
            broken.append(why)
            continue
        plan.items.append(Item(at, p, "sidecar", size, sha, chunks, sid, mode,
                               mtime, bool(gone), mismatch=f"cannot give back whole: {why}; nothing was written"))
    if broken:
        raise RestoreError("cannot give back whole: " + "; ".join(broken) + "; nothing was written")
    _check_targets(plan)
    return plan


ZLIB_MOST = 1032  # zlib's largest ratio: a blob of n bytes inflates to at most about 1032 n


def _figure(path: str, what: str, value, most: int, held: str) -> None:
    """Refuse a catalogued figure that is not a whole number from 0 to
    ``most`` (what the archive holds of the file): a hand may have edited it."""
    if not (type(value) is int and 0 <= value <= most):
        raise RestoreError(f"refusing to restore {path}: the catalog's {what} for it ({value!r}) is not a whole "
                           f"number of at most {most:,} ({held} at most that); was the catalog edited?")


def _check_figures(conn: sqlite3.Connection, file_id: int, path: str) -> None:
    """The figures a rebuild of a catalogued file goes by, checked before it
    reads any, against what the archive holds (never a line count, which a
    hand may raise at will): its read cursor and size no larger than the end
    of its raw chunks' bytes and a line ending (two bytes) for each record
    and each line that is none (``parse_errors``), the cursor no larger than
    the size; its line count a whole number."""
    size, lines, cursor = conn.execute("SELECT size, lines, cursor FROM files WHERE id = ?", (file_id,)).fetchone()
    end, = conn.execute("SELECT coalesce(max(last_offset + bytes), 0) FROM raw_chunks WHERE file_id = ?",
                        (file_id,)).fetchone()
    records, = conn.execute("SELECT count(*) FROM records WHERE file_id = ?", (file_id,)).fetchone()
    errors, = conn.execute("SELECT count(*) FROM parse_errors WHERE file_id = ?", (file_id,)).fetchone()
    most = max(0, end if type(end) is int else 0) + 2 * (records + errors + 1)
    _figure(path, "line count", lines, 1 << 62, "a file holds")
    if cursor is not None:
        _figure(path, "read cursor", cursor, most, "its records and their line endings make")
    if type(size) is int and type(cursor) is int and cursor < size and size > most:
        raise RestoreError(f"refusing to restore {path}: the catalog's size for it ({size:,}) is more than the "
                           f"{most:,} bytes its records and their line endings make, past its read cursor "
                           f"({cursor:,}): its last line was still being written (the catalog has no copy of "
                           "it), or was the catalog edited?")
    _figure(path, "size", size, most, "its records and their line endings make")
    if cursor is not None:
        _figure(path, "read cursor", cursor, size, "its size is")


def _copy_folder(to: str | Path) -> Path:
    """The project folder ``--to`` names, refused inside a session's own
    folder (a copy there would be catalogued as part of that session)."""
    if not str(to).strip():
        raise RestoreError("--to needs a folder to write the copy into")
    folder = Path(os.path.abspath(Path(to).expanduser()))
    for part in folder.parts:
        if SESSION_DIR.fullmatch(part) or part in (SUBAGENTS, *SKIP_DIRS):
            raise RestoreError(f"refusing to write into {folder}: {part} is a session's own folder "
                               "(--to names a project folder)")
    return folder


def _catalogued_paths(unit: units.Unit) -> list[str]:
    """The paths a unit's files go back to (a version kept aside: where it was)."""
    return [unit.session_path, *(archived_from(f[1]) or f[1] for f in unit.files)]


def _check_catalogued_paths(unit: units.Unit) -> None:
    """Refuse a session whose catalogued paths are not absolute and
    normalised (the catalog is read as input like any file: a hand may have
    edited a path to climb out of its folder)."""
    for path in _catalogued_paths(unit):
        if not (os.path.isabs(path) and os.path.normpath(path) == path and "\x00" not in path):
            raise RestoreError(f"refusing to restore {path!r}: the catalog's path for it is not an absolute, "
                               "normalised path (was the catalog edited?)")


def _check_names(unit: units.Unit) -> None:
    """Refuse a session whose catalogued transcripts are not named as
    transcripts (``<id>.jsonl``, ``agent-<x>.jsonl``): an edited path such
    as ``~/.bashrc`` is never written, nor left out unsaid."""
    for path in _catalogued_paths(unit):
        name = PurePosixPath(path).name
        if not (is_session_name(name) and len(name) > len(SESSION_SUFFIX)):
            raise RestoreError(f"refusing to restore {path}: it is not a session transcript's name "
                               f"(<id>{SESSION_SUFFIX}); was the catalog edited?")


def _check_session_rows(conn: sqlite3.Connection, session_ids: set[str]) -> None:
    """Refuse a session whose catalogued session file has a name that is
    neither a transcript's nor a copy's (``.bak``, ``.pending``, which an
    older catalog kept as sessions): edited to ``~/.bashrc``, it would be
    left out of the restore unsaid (the lookups skip such a name)."""
    for sid in session_ids:
        for (path,) in conn.execute("SELECT path FROM files WHERE session_id = ? AND kind = 'session'", (sid,)):
            name = PurePosixPath(archived_from(path) or path).name
            if not (is_session_name(name) or session_of_copy(name) is not None):
                raise RestoreError(f"refusing to restore session {sid}: its session file is catalogued as "
                                   f"{path}, which is not a session transcript's name (<id>{SESSION_SUFFIX}); "
                                   "was the catalog edited?")


def _root_of(src: Path, roots: Iterable[str | Path]) -> Path:
    """The projects folder of ``roots`` whose project folder (a direct
    child) holds the session file ``src``, as Claude Code keeps it
    (``<projects>/<project>/<id>.jsonl``); else RestoreError: a catalog
    edited to point elsewhere, or deeper, would have restore write there."""
    given = [Path(os.path.abspath(Path(r).expanduser())) for r in roots]
    every = [*given, *(Path(os.path.realpath(r)) for r in given)]
    folder = src.parent
    for r in every:
        if folder.parent == r:
            return r
    shown = ", ".join(str(r) for r in given)
    if not any(folder != r and folder.is_relative_to(r) for r in every):
        raise RestoreError(f"refusing to restore {src} in place: {folder} is not under a projects folder "
                           f"({shown}); pass --root with the projects folder it is in, or --to DIR to write "
                           "a copy elsewhere")
    raise RestoreError(f"refusing to restore {src} in place: {folder} is not a project folder of a projects "
                       f"folder ({shown}), but a folder further down (Claude Code keeps a session as "
                       "<projects>/<project>/<id>.jsonl); was the catalog edited? (--to DIR writes a copy "
                       "elsewhere)")


def _check_layout(plan: Plan) -> None:
    """Where a plan writes, checked for every target it has (by
    ``plan_restore``, and by ``restore`` again just before writing): only
    where Claude Code keeps a session's files in its project folder
    ``plan.folder``: ``<id>.jsonl``, ``<id>/...`` (subagents, tool-results,
    persisted, meta files) and an older release's ``agent-*.jsonl``; in
    place, that folder a direct child of its projects folder
    (``plan.root``); and no folder from the projects folder down (the
    project folder, the session's folder and those below it) a symlink or
    other than a folder; the projects folder itself may be a link (a
    symlinked ``~/.claude``). Else RestoreError, nothing written."""
    folder = plan.folder
    if plan.root is not None and not plan.copy and folder.parent != plan.root:
        raise RestoreError(f"refusing to write into {folder}: not a project folder of {plan.root}")
    for p in [folder, *folder.parents]:
        if p.exists() and not p.is_dir():
            raise RestoreError(f"refusing to write into {folder}: {p} is a file, not a folder")
    if folder.is_symlink():
        raise RestoreError(f"refusing to write into {folder}: it is a symlink")
    dirs = {plan.stem, sidecarmod.safe_name(plan.stem)}
    for it in plan.items:
        try:
            rel = it.path.relative_to(folder).parts
        except ValueError:
            rel = ()
        name = rel[-1] if rel else ""
        if not (len(rel) == 1 and (name == plan.stem + SESSION_SUFFIX
                                   or name.startswith(SUBAGENT_PREFIX) and name.endswith(SESSION_SUFFIX))
                or len(rel) > 1 and rel[0] in dirs):
            raise RestoreError(f"refusing to write {it.path}: not where Claude Code keeps a session's files "
                               f"(in {folder}: {plan.stem}{SESSION_SUFFIX}, {plan.stem}/..., "
                               f"{SUBAGENT_PREFIX}*{SESSION_SUFFIX}); was the catalog edited?")
        d = folder
        for part in rel[:-1]:
            d = d / part
            if d.is_symlink():
                raise RestoreError(f"refusing to write {it.path}: {d} is a symlink")
            if d.exists() and not d.is_dir():
                raise RestoreError(f"refusing to write {it.path}: {d} is a file, not a folder")


def _regular(p: Path) -> bool:
    try:
        return not p.is_symlink() and p.is_file()
    except OSError:
        return False


def inflate_chunks(conn: sqlite3.Connection, blob_rowid: int, size: int | None, path: str) -> Iterator[bytes]:
    """A stored sidecar's bytes, inflated a piece at a time from the blob
    read in pieces (``blobopen``): never more than its catalogued size. A
    blob that inflates past it, is cut short, or is not zlib at all is
    corrupt: RestoreError naming ``path``."""
    limit = size or 0
    corrupt = RestoreError(f"cannot give back whole: {path} (its stored content is corrupt: "
                           "it does not inflate to its catalogued size); nothing was written")
    d = zlib.decompressobj()
    out = 0
    try:
        with conn.blobopen("blobs", "data", blob_rowid, readonly=True) as blob:
            while not d.eof:
                data = d.unconsumed_tail or blob.read(CHUNK)
                if not data:
                    raise corrupt  # cut short
                while True:
                    piece = d.decompress(data, CHUNK)
                    out += len(piece)
                    if out > limit:
                        raise corrupt
                    if piece:
                        yield piece
                    data = d.unconsumed_tail
                    if not data or d.eof:
                        break
    except zlib.error:
        raise corrupt from None
    if out != limit:
        raise corrupt


def _check_targets(plan: Plan) -> None:
    """Refuse a target folder that is a file or a link, an item whose
    target something else stands at (``_in_the_way``), and a plan with
    nothing to write; a file already there with the same bytes is left as
    it is."""
    _check_layout(plan)
    for it in plan.items:
        p = it.path
        if it.present:
            continue
        why = _in_the_way(it, plan.copy)
        if why:
            raise RestoreError(why)
        it.present = os.path.lexists(p)  # these very bytes
    if not plan.todo:
        first = plan.items[0].path if plan.items else plan.folder
        if plan.copy:
            raise NothingMissing(f"{first} exists: a copy of the session is already there, nothing written")
        raise NothingMissing(f"{first} exists: the session is still there, nothing of it is missing "
                             "(restore --to DIR writes a copy elsewhere)")


def _in_the_way(it: Item, copy: bool) -> str | None:
    """Why the item cannot be written at its path (a link, a folder,
    something not a regular file, a regular file with other bytes than the
    catalogued ones), else None: nothing there, or these very bytes. A
    file with other bytes is never "the session still there": only the
    catalogued bytes (or the live file refresh last saw, ``Item.present``
    from the plan) are."""
    p = it.path
    if not os.path.lexists(p):
        return None
    if p.is_symlink():
        return f"refusing to write {p}: a link is in the way (to {os.readlink(p)}); txdb never replaces a file"
    if _holds(p, it):
        return None
    if not p.is_file():
        what = "a folder" if p.is_dir() else "something that is not a regular file"
        return f"refusing to write {p}: {what} is in the way; txdb never replaces a file"
    if copy:
        return f"{p} exists with other content: txdb never replaces a file (give --to another folder)"
    return (f"{p} is another file, not the catalogued one (its bytes differ): nothing was overwritten "
            "(restore --to DIR writes a copy elsewhere)")


def _holds(p: Path, it: Item) -> bool:
    """The file at ``p`` has the item's very bytes (read in pieces)."""
    try:
        if not p.is_file() or p.stat().st_size != it.size:
            return False
        with open(p, "rb") as fh:
            return _digest(iter(lambda: fh.read(CHUNK), b"")) == (it.sha256, it.size)
    except OSError:
        return False


def one_plan_per_target(plans: list[Plan]) -> tuple[list[Plan], list[str]]:
    """The plans that write no file another plan before them writes (two
    sessions' files went from one path: one of them can stand there), and
    why each other one is left out."""
    claimed: dict[Path, str] = {}
    kept, left = [], []
    for plan in plans:
        clash = next((it.path for it in plan.todo if it.path in claimed), None)
        if clash is not None:
            left.append(f"{plan.session_id}: {clash} is where this restore gives back session {claimed[clash]}; "
                        f"give {plan.session_id} back elsewhere with --to DIR")
            continue
        claimed.update((it.path, plan.session_id) for it in plan.todo)
        kept.append(plan)
    return kept, left


def restore(plans: list[Plan], each: bool = False) -> list[Path]:
    """Write the plans' files (those not already there), all or none: a
    failure takes back what this call wrote and the folders it made
    (``each``: what that plan wrote, its error kept in ``Plan.failed``, the other plans written).
    Each file is streamed from the catalog, hashed again as it is written
    (linked only when it matches), with its catalogued mode and mtime. The
    files written."""
    written: list[tuple[Path, list[Path], list[Path]]] = []
    try:
        for plan in plans:
            todo = [sidecarmod.Sidecar(it.path, b"", False, chunks=it.chunks, size=it.size, sha256=it.sha256,
                                       mode=it.mode, mtime_ns=it.mtime_ns, mismatch=it.mismatch or None)
                    for it in plan.todo]
            made: list[Path] = []
            try:
                _check_layout(plan)  # again: a folder swapped for a link since the plan was made
                files = sidecarmod.write(plan.folder, todo, what="a restored file", made=made)
                written.append((plan.folder, files, made))
                for it, sc in zip(plan.todo, todo):
                    it.written = sc.written
            except Exception as e:
                if not each:
                    raise
                plan.failed = str(e)  # sidecar.write took back what it made of this plan, folders too
    except BaseException as e:
        for folder, files, made in reversed(written):
            sidecarmod.remove(folder, files, made)
        if isinstance(e, Exception) and not isinstance(e, RestoreError):
            raise RestoreError(str(e)) from None
        raise
    return [p for _folder, files, _made in written for p in files]


def register_restored(conn: sqlite3.Connection, plans: list[Plan]) -> None:
    """Make the catalog say what restore wrote, without reading it again:
    a file written in place is the catalogued one (its rows, sha256, size
    and mtime), so only its new inode is recorded and its row is live again;
    the next refresh finds it unchanged. The figures are those of the file
    restore wrote (``Item.written``: its fstat before it had a name, its
    size the bytes checked against sha256), never a stat of the path now: a
    line a writer appended since is growth the next refresh reads. A gone version kept aside
    (``paths.archived_path``) takes its path back (a row still there moves
    aside in its place). A ``--to`` copy is not catalogued: it is listed in
    ``restored_copies``, and a refresh that walks its folder indexes it as
    a file of its own; ``restore ID`` keeps meaning the original."""
    with transaction(conn):
        for plan in plans:
            if plan.failed:
                continue
            if plan.copy:
                head = plan.items[0]
                conn.execute("INSERT OR REPLACE INTO restored_copies (path, session_id, source, restored_at) "
                             "VALUES (?, ?, ?, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                             (str(head.path), plan.session_id, head.source))
                continue
            for it in plan.todo:
                st = it.written
                if st is None:
                    continue
                if it.kind == "sidecar":
                    conn.execute("UPDATE sidecars SET size = ?, mtime_ns = ?, mode = ?, gone = 0, gone_at = NULL "
                                 "WHERE id = ?", (it.size, st.st_mtime_ns, st.st_mode & 0o7777, it.row_id))
                    continue
                path = str(it.path)
                if conn.execute("SELECT path FROM files WHERE id = ?", (it.row_id,)).fetchone() != (path,):
                    for (other,) in conn.execute("SELECT id FROM files WHERE path = ? AND id <> ?",
                                                 (path, it.row_id)).fetchall():
                        conn.execute("UPDATE files SET path = ?, gone = 1, gone_at = coalesce(gone_at, "
                                     "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')) WHERE id = ?",
                                     (archived_path(path, other), other))
                conn.execute("UPDATE files SET path = ?, size = ?, mtime_ns = ?, inode = ?, mode = ?, gone = 0, "
                             "gone_at = NULL WHERE id = ?",
                             (path, it.size, st.st_mtime_ns, st.st_ino, st.st_mode & 0o7777, it.row_id))


def due_again(conn: sqlite3.Connection, plans: list[Plan], config_dir: Path,
              now: float | None = None) -> list[tuple[Path, int, str]]:
    """The files the plans wrote in place that Claude Code's next start
    deletes again, judged as its cleanup judges them on disk
    (``doctor.sweep_mtime_ns``: a subagent transcript in a session's folder
    goes with the session file while that is there, whatever its own
    mtime) and keeps none of (``doctor.sweep_kept``: a desktop app's
    transcript): (path, cleanupPeriodDays, the file setting it), for the
    settings of the session's project (its cwd, when still a folder).
    The rules are doctor's own, so the two never disagree."""
    from txdb.catalog.doctor import retention, swept, sweep_kept, sweep_mtime_ns

    now = time.time() if now is None else now
    out = []
    for plan in plans:
        if plan.copy or plan.failed:
            continue
        row = conn.execute("SELECT cwd FROM sessions WHERE file_id = ?", (plan.file_id,)).fetchone()
        cwd = Path(row[0]) if row and isinstance(row[0], str) and os.path.isabs(row[0]) else Path.cwd()
        try:
            ret = retention(config_dir, cwd if cwd.is_dir() else Path.cwd(), now=now)
        except OSError:
            continue
        if ret.skipped or ret.cutoff is None:
            continue
        kept: dict[str, bool] = {}
        for it in plan.todo:
            t = sweep_mtime_ns(it.path, plan.folder)
            if t is not None and swept(t, ret.days, now) and not sweep_kept(it.path, plan.folder, ret, now, kept):
                out.append((it.path, ret.days, ret.source))
    return out


def pruned_note(conn: sqlite3.Connection, ref: str) -> str | None:
    """What ``txdb prune`` left of a session named by id, prefix or path: a
    sentence saying its archive was deleted, or None when it never was."""
    row = conn.execute(
        "SELECT session_id, path, pruned_at FROM pruned_sessions WHERE session_id = ? OR path = ? "
        "OR (length(?) >= ? AND substr(session_id, 1, length(?)) = ?) ORDER BY pruned_at DESC LIMIT 1",
        (ref, ref, ref, catalog.MIN_PREFIX, ref, ref)).fetchone()
    if row is None:
        return None
    return (f"session {row[0] or ref} was pruned from the catalog at {row[2]} (`txdb prune`): "
            f"its archive ({row[1]}) is deleted, nothing of it can be restored")


def choose(conn: sqlite3.Connection, ref: str) -> int:
    """The session file (``files.id``) ``restore REF`` gives back. A path
    names its file; an id or prefix names the session's original file:
    ``restore --to`` copies (``restored_copies``) only when nothing else
    matches, a gone one before a live one (whose missing files, a lone
    subagent transcript, are then what is restored), a subagent
    transcript's name its session. Several gone originals are ambiguous."""
    if catalog.is_bare_name(ref) or catalog.looks_like_path(ref):
        rows = _gone_at(conn, ref)
        held = sorted({r[2] or "" for r in rows if r[3] == "session" and r[4]})
        if len(held) > 1:  # another session's file was put at the path, and went too
            raise AmbiguousSession(f"{ref!r} held the files of {len(held)} sessions ({', '.join(held[:5])}): "
                                   "name the session by its id")
        if not rows:
            try:
                got = _catalogued(conn, ref)
            except SessionNotFound:
                note = pruned_note(conn, str(Path(ref).expanduser().absolute()))
                if note:
                    raise SessionNotFound(note) from None
                raise
            rows = [(got.file_id, got.path, None, got.kind, 0)]
    else:
        rows = catalog.session_matches(conn, ref, live_first=False)
        if not rows:
            rows = [(r[0], r[1], None, r[2], r[3]) for r in units.lone_subagents(conn, ref, catalog.MIN_PREFIX)]
        if not rows:
            note = pruned_note(conn, ref)
            if note:
                raise SessionNotFound(note)
            got = _catalogued(conn, ref)  # its own error, or the catalogued file found on disk
            rows = [(got.file_id, got.path, None, got.kind, 0)]
    sessions = [r for r in rows if r[3] == "session"]
    if not sessions:  # subagent transcripts: their session's file, or the lone session they make
        lone: dict[str, list[units.Row]] = {}
        for r in rows:
            unit = units.unit_of(conn, r[0])
            if unit is None:
                continue
            if unit.lone:
                lone.setdefault(unit.session_path, sorted(unit.files, key=lambda f: (not f[3], -f[0])))
            else:
                sessions.append((*unit.files[0][:2], None, unit.files[0][2], unit.files[0][3]))
        if not sessions:
            if not lone:
                raise RestoreError(f"{rows[0][1]} is not a session transcript (a backup, pending copy or other "
                                   "file): restore takes a session id or its .jsonl")
            # a lone session with a file gone before those with none (a copy restored elsewhere, say)
            meant = [fs for fs in lone.values() if fs[0][3]] or list(lone.values())
            if len(meant) > 1:
                listing = ", ".join(sorted(fs[0][1] for fs in meant)[:5])
                raise AmbiguousSession(f"{ref!r} matches {len(meant)} sessions (files {listing}); pass a path")
            return meant[0][0][0]
    copies = {p for (p,) in conn.execute("SELECT path FROM restored_copies")}
    originals = [r for r in sessions if (archived_from(r[1]) or r[1]) not in copies] or sessions
    bases: dict[str, list[tuple]] = {}
    for r in originals:
        bases.setdefault(archived_from(r[1]) or r[1], []).append(r)
    # a copy of this session put at another gone session's path (its home, by name) is not where an id
    # gives it back: that session is (restore PATH, or its own id)
    homes = {b: rs for b, rs in bases.items()
             if not all(units.is_anothers_path(conn, b, r[2]) for r in rs)} or bases
    gone = [b for b, rs in homes.items() if any(r[4] for r in rs) or not os.path.lexists(b)]
    pick = gone if gone else list(homes)
    if len(pick) > 1:
        listing = ", ".join(sorted(pick)[:5])
        raise AmbiguousSession(f"{ref!r} matches {len(pick)} files ({listing}); pass a path")
    # an id names that session before another session's file put at its path
    rs = bases[pick[0]]
    return latest_gone(conn, next((r for r in rs if (r[2] or "").startswith(ref)), rs[0])[0])


def taken_as(conn: sqlite3.Connection, ref: str, file_id: int) -> dict | None:
    """The session ``ref`` was taken as, when :func:`choose` (which gave
    ``file_id``) took it as another than the one it names (a subagent
    transcript's path or name stands for its session): ``{"named",
    "session_id", "session_path"}``; None when ``ref`` names that session
    (its path, a version of it kept aside, its id or a prefix of it)."""
    unit = units.unit_of(conn, file_id)
    if unit is None:
        return None
    spath = unit.session_path
    sid = unit.own_id or unit.session_id  # another session's file at a path is that session, not the path's name
    if catalog.is_bare_name(ref):
        if sid.startswith(session_stem(ref)):
            return None
    elif catalog.looks_like_path(ref):
        named = os.path.abspath(os.path.expanduser(ref))
        (path,) = conn.execute("SELECT path FROM files WHERE id = ?", (file_id,)).fetchone()
        if spath in (named, archived_from(named)) or (path == named and not unit.lone):
            return None
    elif sid.startswith(ref):
        return None
    return {"named": ref, "session_id": sid, "session_path": spath}


def _catalogued(conn: sqlite3.Connection, ref: str) -> catalog.SessionRef:
    """The catalogued file ``ref`` names, never indexing one (restore and
    prune act on what refresh archived: a dry run or a refusal adds no row);
    SessionNotFound for a file the catalog lacks."""
    got = catalog.resolve_session(conn, ref, index=False)
    if got.file_id is None and got.kind not in ("session", "subagent"):
        raise RestoreError(f"{got.path} is not a session transcript ({got.kind}): restore and prune take a session id "
                           "or its .jsonl")
    if got.file_id is None:
        raise SessionNotFound(f"{got.path} is not in the catalog: restore and prune act on what `txdb refresh` "
                              "archived under the projects folders")
    return got


def _gone_at(conn: sqlite3.Connection, ref: str) -> list[tuple]:
    """The catalogued files at the path ``ref`` names when nothing is there
    any more (a gone file, or versions of it kept aside), as
    :func:`catalog.session_matches` gives rows; [] when something is there."""
    p = os.path.abspath(os.path.expanduser(ref))
    if os.path.lexists(p):
        return []
    return conn.execute(
        "SELECT id, path, session_id, kind, gone FROM files WHERE path = ? OR (path > ? AND path < ?) "
        "ORDER BY gone DESC, gone_at DESC, id DESC", (p, *archived_bounds(p))).fetchall()


def select_sessions(conn: sqlite3.Connection, db_path: str | Path, where: str) -> list[int]:
    """The session files (``files.id``) whose ``sessions`` row matches the
    condition, read-only and authorized like ``txdb query``; a ``restore
    --to`` copy only when its original is not among them. A subagent
    transcript whose session file the catalog does not hold
    (:mod:`txdb.catalog.units`) stands for the lone session it makes, once."""
    from txdb.surgery.select import check_condition  # the --where rules (loaded only for --where)

    cond = check_condition(where)
    ro = connect_readonly(db_path)
    try:
        _, rows = run_query(ro, f"SELECT s.file_id, f.kind FROM sessions s JOIN files f ON f.id = s.file_id "
                                f"WHERE s.file_id IN (SELECT file_id FROM sessions WHERE ({cond})) ORDER BY s.file_id")
    except QueryError as e:
        raise type(e)(f"--where over sessions: {e}") from None
    finally:
        ro.close()
    ids = [r[0] for r in rows if r[1] == "session"]
    lone: set[str] = set()
    for fid, _kind in (r for r in rows if r[1] == "subagent"):
        unit = units.unit_of(conn, fid)
        if unit is not None and unit.lone and unit.session_path not in lone:
            lone.add(unit.session_path)
            ids.append(fid)
    copies = {p for (p,) in conn.execute("SELECT path FROM restored_copies")}
    info = {i: conn.execute("SELECT path, session_id FROM files WHERE id = ?", (i,)).fetchone() for i in ids}
    originals = {info[i][1] for i in ids if info[i] and info[i][0] not in copies}
    return [i for i in ids if not (info[i] and info[i][0] in copies and info[i][1] in originals)]
