"""Give back, from the catalog, a session whose files are gone.

A session's files are rebuilt from what refresh kept: its ``.jsonl`` (and
each subagent transcript's) from ``records.raw`` in offset order, the bytes
between records being line endings; the files in its folder
(``tool-results/``, ``persisted/``, ``subagents/*.meta.json``) from
``sidecars`` and their ``blobs``. Each rebuilt file must hash to the sha256
refresh recorded (``files.sha256``, ``sidecars.sha256``) before anything is
written; a file that cannot be given back whole (an unparsable line, a last
line still being written when it vanished, rows an older txdb kept without
a hash) refuses the restore and is named.

Writing never replaces a file: each goes to a temp file, is fsynced and
linked to its name (``sidecar.write``), mode 0600, folders 0700; a
failure takes back every file this restore created. A session file still
on disk is refused (``--to`` writes the copy into another project folder).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from txdb.catalog.db import connect_readonly, run_query
from txdb.errors import QueryError, RestoreError, SessionNotFound
from txdb.model import sidecar as sidecarmod
from txdb.model.paths import ARCHIVED_SUFFIX, archived_from, session_stem
from txdb.surgery.select import check_condition


@dataclass
class Item:
    path: Path      # where it is written
    source: str     # the catalogued path it comes from
    kind: str       # session, subagent, sidecar
    data: bytes
    sha256: str
    present: bool = False  # a file with these very bytes is there already (left alone)

    def as_dict(self) -> dict:
        return {"path": str(self.path), "from": self.source, "kind": self.kind, "bytes": len(self.data),
                "sha256": self.sha256, "present": self.present}


@dataclass
class Plan:
    session_id: str
    file_id: int
    folder: Path                 # the project folder it is written into
    items: list[Item] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"session_id": self.session_id, "folder": str(self.folder),
                "files": [i.as_dict() for i in self.items]}


NEWLINES = (b"\n", b"\r\n")  # the line endings a rebuilt file is tried with, in order


def rebuild(conn: sqlite3.Connection, file_id: int, newline: bytes = b"\n") -> bytes:
    """A catalogued file's bytes from its records: each record's raw JSON at
    its offset, the gaps between records (and after the last, up to the
    file's catalogued size) filled with ``newline`` (``\\n`` where a gap is
    not a whole number of them). The caller checks the result against
    ``files.sha256``."""
    size, = conn.execute("SELECT size FROM files WHERE id = ?", (file_id,)).fetchone()
    pieces: list[bytes] = []
    gaps: list[int] = []
    at = 0
    for offset, raw in conn.execute(
            "SELECT offset, CAST(raw AS BLOB) FROM records WHERE file_id = ? ORDER BY offset", (file_id,)):
        if offset < at:
            raise RestoreError(f"file {file_id}: records overlap at byte {offset}")
        gaps.append(offset - at)
        pieces.append(raw)
        at = offset + len(raw)
    gaps.append(max(0, size - at))
    out = bytearray()
    n = len(newline)
    for gap, piece in zip(gaps, pieces + [b""]):
        out += newline * (gap // n) if gap % n == 0 else b"\n" * gap
        out += piece
    return bytes(out)


def rebuild_whole(conn: sqlite3.Connection, file_id: int, sha256: str) -> bytes | None:
    """The file's bytes when a rebuild hashes to ``sha256``, else None."""
    for newline in NEWLINES:
        data = rebuild(conn, file_id, newline)
        if _sha(data) == sha256:
            return data
    return None


def _why_not_whole(conn: sqlite3.Connection, file_id: int) -> str:
    """Why the catalogued lines of a file do not make up the bytes refresh hashed."""
    bad = conn.execute("SELECT line FROM parse_errors WHERE file_id = ? AND recovered = 0 ORDER BY line LIMIT 1",
                       (file_id,)).fetchone()
    if bad:
        return f"line {bad[0]} did not parse: the catalog has no copy of it"
    size, cursor = conn.execute("SELECT size, cursor FROM files WHERE id = ?", (file_id,)).fetchone()
    if cursor is not None and cursor < size:
        return "its last line was still being written: the catalog has no copy of it"
    return "the sha256 of its rebuilt bytes differs from the one refresh recorded: its rows changed since"


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
    (``paths.archived_path``: another file appeared at its path), the
    newest gone one whose records hold its session, else the newest gone
    one; when none is gone, that file (restore refuses: it is in the way)."""
    path, = conn.execute("SELECT path FROM files WHERE id = ?", (file_id,)).fetchone()
    base = archived_from(path) or path
    prefix = base + ARCHIVED_SUFFIX
    row = conn.execute(
        "SELECT f.id FROM files f WHERE f.gone = 1 AND (f.path = ? OR substr(f.path, 1, ?) = ?) "
        "ORDER BY EXISTS (SELECT 1 FROM records r WHERE r.file_id = f.id AND r.session_id = f.session_id) DESC, "
        "f.id DESC LIMIT 1", (base, len(prefix), prefix)).fetchone()
    return row[0] if row else file_id


def plan_restore(conn: sqlite3.Connection, file_id: int, to: str | Path | None = None) -> Plan:
    """What restoring the session of ``file_id`` writes (nothing written):
    every file rebuilt and checked against its sha256. RestoreError names
    each file that cannot be given back whole, and each target that is in
    the way."""
    row = conn.execute("SELECT path, kind, session_id, sha256 FROM files WHERE id = ?", (file_id,)).fetchone()
    if row is None:
        raise SessionNotFound(f"no catalogued file {file_id}")
    path, kind, session_id, _ = row
    path = archived_from(path) or path  # a gone version kept aside goes back to where it was
    if kind != "session":
        raise RestoreError(f"{path} is a subagent transcript: restore the session it belongs to")
    src = Path(path)
    stem = session_stem(src)
    folder = Path(to).expanduser().absolute() if to is not None else src.parent
    plan = Plan(session_id or stem, file_id, folder)

    def target(rel: str) -> Path:
        return folder / _inside(rel)

    files = [(file_id, path, "session", src.name)]
    prefix = str(src.parent / stem) + os.sep
    for fid, p in conn.execute(
            "SELECT id, path FROM files WHERE kind = 'subagent' AND substr(path, 1, ?) = ? ORDER BY path",
            (len(prefix), prefix)):
        files.append((fid, p, "subagent", f"{stem}/{Path(p).relative_to(src.parent / stem).as_posix()}"))
    broken: list[str] = []
    for fid, p, k, rel in files:
        sha, = conn.execute("SELECT sha256 FROM files WHERE id = ?", (fid,)).fetchone()
        if sha is None:
            broken.append(f"{p} (the catalog has no sha256 of it: it was gone before a refresh could hash it)")
            continue
        data = rebuild_whole(conn, fid, sha)
        if data is None:
            broken.append(f"{p} ({_why_not_whole(conn, fid)})")
            continue
        plan.items.append(Item(target(rel), p, k, data, sha))
    sdir = sidecarmod.session_dir(src)
    for p, rel, sha, size, blob, bsize in conn.execute(
            "SELECT sc.path, sc.rel, sc.sha256, sc.size, b.data, b.size FROM sidecars sc "
            "LEFT JOIN blobs b ON b.sha256 = sc.sha256 WHERE substr(sc.path, 1, ?) = ? "
            "ORDER BY sc.rel", (len(str(sdir)) + 1, str(sdir) + os.sep)):
        data = _inflate(blob, size) if blob is not None else None
        if data is None or len(data) != size or _sha(data) != sha:
            broken.append(f"{p} (its stored content is missing, corrupt or does not match its sha256)")
            continue
        plan.items.append(Item(target(f"{sdir.name}/{rel}"), p, "sidecar", data, sha))
    if broken:
        raise RestoreError("cannot give back whole: " + "; ".join(broken) + "; nothing was written")
    _check_targets(plan)
    return plan


def _inflate(blob: bytes, size: int | None) -> bytes | None:
    """A stored sidecar's bytes, never more than its catalogued size (a blob
    that inflates past it, or is not zlib at all, is corrupt: None)."""
    d = zlib.decompressobj()
    try:
        data = d.decompress(blob, (size or 0) + 1)
    except zlib.error:
        return None
    if len(data) > (size or 0) or d.unconsumed_tail or not d.eof:
        return None
    return data


def _check_targets(plan: Plan) -> None:
    """Refuse a target folder that is a file or a link, a session or
    subagent file already there, and any file there with other bytes; a
    sidecar already there with the same bytes is left as it is."""
    folder = plan.folder
    for p in [folder, *folder.parents]:
        if p.is_symlink() and p == folder:
            raise RestoreError(f"refusing to write into {folder}: it is a symlink")
        if p.exists() and not p.is_dir():
            raise RestoreError(f"refusing to write into {folder}: {p} is a file, not a folder")
    for it in plan.items:
        p = it.path
        for d in p.parents:
            if d == folder:
                break
            if d.is_symlink():
                raise RestoreError(f"refusing to write {p}: {d} is a symlink")
            if d.exists() and not d.is_dir():
                raise RestoreError(f"refusing to write {p}: {d} is a file, not a folder")
        if not os.path.lexists(p):
            continue
        if p.is_symlink():
            raise RestoreError(f"refusing to write {p}: a link is in the way (to {os.readlink(p)}); "
                               "txdb never replaces a file")
        if it.kind != "sidecar":
            raise RestoreError(f"{p} exists: the session is still there (restore --to DIR writes a copy elsewhere)")
        try:
            same = p.is_file() and not p.is_symlink() and p.read_bytes() == it.data
        except OSError:
            same = False
        if not same:
            raise RestoreError(f"{p} exists with other content: txdb never replaces a file")
        it.present = True


def restore(plans: list[Plan]) -> list[Path]:
    """Write the plans' files (those not already there), all or none: a
    failure takes back what this call wrote. The files written."""
    written: list[tuple[Path, list[Path]]] = []
    try:
        for plan in plans:
            todo = [sidecarmod.Sidecar(it.path, it.data, it.present) for it in plan.items]
            written.append((plan.folder, sidecarmod.write(plan.folder, todo, what="a restored file")))
    except BaseException as e:
        for folder, files in written:
            sidecarmod.remove(folder, files)
        if isinstance(e, Exception) and not isinstance(e, RestoreError):
            raise RestoreError(str(e)) from None
        raise
    return [p for _folder, files in written for p in files]


def refresh_restored(conn: sqlite3.Connection, plans: list[Plan]) -> None:
    """Catalog what was written (``refresh_path``: each session and subagent
    transcript, the session's folder with it), so that ``sessions --gone``
    stops listing a session as soon as it is back."""
    from txdb.catalog.ingest.store import refresh_path
    for plan in plans:
        for it in plan.items:
            if it.kind in ("session", "subagent"):
                refresh_path(conn, it.path, sidecars=it.kind == "session")


def select_sessions(conn: sqlite3.Connection, db_path: str | Path, where: str) -> list[int]:
    """The session files (``files.id``) whose ``sessions`` row matches the
    condition, read-only and authorized like ``txdb query``."""
    cond = check_condition(where)
    ro = connect_readonly(db_path)
    try:
        _, rows = run_query(ro, f"SELECT file_id FROM sessions WHERE ({cond}) AND file_id IN "
                                "(SELECT id FROM files WHERE kind = 'session') ORDER BY file_id")
    except QueryError as e:
        raise type(e)(f"--where over sessions: {e}") from None
    finally:
        ro.close()
    return [r[0] for r in rows]
