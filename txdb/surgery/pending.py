"""Copy-first: the pending copy, its snapshot record, and ``apply``.

Mutating commands never write a session file. They work on
``<session>.jsonl.pending``, a copy taken by ``snapshot`` (complete lines
only: a line the CLI is still writing is left out), with a sidecar
``<session>.jsonl.pending.json`` recording the original's size and the
sha256 of that prefix. ``apply`` is the one write to the real file:

1. settle: the original must not change during 400 ms (a live CLI appends
   every 100 ms);
2. prefix hash: the original must still begin with the snapshot's bytes
   (else it was rewritten and the copy no longer descends from it);
3. verify: the pending copy must not fail ``verify`` in any way the
   original did not already fail;
4. one enumerated backup (``.bak``, ``.bak.1``, ...) unless ``backup=False``;
5. the verified bytes go to a temp file in the same folder, fsync, one
   ``os.replace`` onto the original, fsync of the folder.

Lines appended to the original after the snapshot are discarded (counted in
the report). A refusal raises ``SurgeryError`` and changes no file. A
process killed at any point leaves the old file or the new one, whole.
"""

from __future__ import annotations

import collections
import hashlib
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from ..errors import SurgeryError
from ..verify import Report, verify_file
from .transcript import FILE_MODE, write_atomic

PENDING = ".pending"
META = ".pending.json"
SETTLE_SECONDS = 0.4
CRASH_ENV = "TXDB_APPLY_CRASH_AT"  # test hook: checked, backup, temp, swapped


def original_path(path: str | Path) -> Path:
    p = Path(path).expanduser()
    if p.name.endswith(".jsonl" + PENDING):
        p = p.with_name(p.name[: -len(PENDING)])
    return p


def pending_path(path: str | Path) -> Path:
    o = original_path(path)
    return o.with_name(o.name + PENDING)


def meta_path(path: str | Path) -> Path:
    o = original_path(path)
    return o.with_name(o.name + META)


def _crash(step: str) -> None:
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def complete_prefix(data: bytes) -> int:
    """Length of ``data`` up to its last complete line. A final line without
    a newline counts when it is a whole JSON object (a published file); a
    line the CLI is still writing does not parse and is left out."""
    if not data or data.endswith(b"\n"):
        return len(data)
    cut = data.rfind(b"\n") + 1
    tail = data[cut:].strip()
    if tail.startswith(b"{") and tail.endswith(b"}"):
        try:
            if isinstance(orjson.loads(tail), dict):
                return len(data)
        except orjson.JSONDecodeError:
            pass
    return cut


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Snapshot:
    original: str
    pending: str
    size: int
    sha256: str
    created: bool  # False when an existing pending copy was reused
    left_out_bytes: int = 0  # an unfinished last line not copied

    def as_dict(self) -> dict:
        return asdict(self)


def read_meta(path: str | Path) -> dict | None:
    try:
        with open(meta_path(path), "rb") as fh:
            meta = orjson.loads(fh.read())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("size"), int) or not isinstance(meta.get("sha256"), str):
        return None
    return meta


def take_snapshot(path: str | Path) -> tuple[bytes, dict]:
    """(complete-line bytes of the original, the sidecar record), written nowhere."""
    orig = original_path(path)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    with open(orig, "rb") as fh:
        data = fh.read()
    size = complete_prefix(data)
    meta = {"original": str(orig), "size": size, "sha256": sha256(data[:size]),
            "taken_at": time.time(), "left_out_bytes": len(data) - size, "tool": "txdb"}
    return data[:size], meta


def write_snapshot(path: str | Path, data: bytes, meta: dict) -> None:
    """Sidecar first, then the pending copy: a crash in between leaves a
    sidecar without a copy, which the next snapshot overwrites."""
    write_atomic(meta_path(path), orjson.dumps(meta))
    write_atomic(pending_path(path), data)


def record_pass(path: str | Path, entry: dict) -> None:
    """Remember in the sidecar which command produced (this pass of) the
    pending copy, so that ``apply`` can log it. Never touches the copy."""
    meta = read_meta(path)
    if meta is None:
        return
    meta["passes"] = list(meta.get("passes") or []) + [entry]
    write_atomic(meta_path(path), orjson.dumps(meta))


def snapshot(path: str | Path, refresh: bool = False) -> Snapshot:
    """Create the pending copy, or reuse the one there (``refresh`` discards it)."""
    orig = original_path(path)
    pend = pending_path(orig)
    meta = read_meta(orig)
    if pend.exists() and meta is not None and not refresh:
        return Snapshot(str(orig), str(pend), meta["size"], meta["sha256"], False, meta.get("left_out_bytes", 0))
    data, meta = take_snapshot(orig)
    write_snapshot(orig, data, meta)
    return Snapshot(str(orig), str(pend), meta["size"], meta["sha256"], True, meta["left_out_bytes"])


def check_descends(orig: Path, meta: dict, data: bytes | None = None) -> bytes:
    """The original's current bytes, after checking they still begin with the snapshot."""
    if data is None:
        with open(orig, "rb") as fh:
            data = fh.read()
    size = meta["size"]
    if len(data) < size or sha256(data[:size]) != meta["sha256"]:
        raise SurgeryError(
            f"{orig.name} was rewritten since the snapshot (prefix hash differs); "
            f"the pending copy no longer descends from it: run `txdb snapshot --refresh {orig}`"
        )
    return data


def new_errors(before: Report, after: Report) -> list[str]:
    """Error findings of ``after`` beyond those ``before`` already had (by code)."""
    had = collections.Counter(f.code for f in before.findings if f.severity == "error")
    now = collections.Counter(f.code for f in after.findings if f.severity == "error")
    out = []
    for f in after.findings:
        if f.severity == "error" and now[f.code] > had[f.code]:
            out.append(f"{f.code}: {f.message}")
    return out


def next_backup(orig: Path) -> Path:
    cand = orig.with_name(orig.name + ".bak")
    n = 1
    while cand.exists() or cand.is_symlink():
        cand = orig.with_name(f"{orig.name}.bak.{n}")
        n += 1
    return cand


@dataclass
class ApplyReport:
    original: str
    pending: str
    dry_run: bool
    backup: str | None
    size_before: int
    size_after: int
    discarded_lines: int
    discarded_bytes: int
    errors_before: int
    errors_after: int
    applied: bool
    passes: list = None  # the commands that produced the pending copy (from its sidecar)

    def as_dict(self) -> dict:
        return asdict(self)


def apply(path: str | Path, *, dry_run: bool = False, backup: bool = True,
          settle: float = SETTLE_SECONDS) -> ApplyReport:
    """Swap the pending copy in for the original, after every check. See the module doc."""
    orig = original_path(path)
    pend = pending_path(orig)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    if not pend.is_file():
        raise SurgeryError(f"no pending copy for {orig.name}: run a strip command (or `txdb snapshot`) first")
    meta = read_meta(orig)
    if meta is None:
        raise SurgeryError(f"the snapshot record {meta_path(orig).name} is missing or unreadable: "
                           f"run `txdb snapshot --refresh {orig}`")
    st1 = os.stat(orig)
    time.sleep(settle)
    st2 = os.stat(orig)
    if (st1.st_size, st1.st_mtime_ns) != (st2.st_size, st2.st_mtime_ns):
        raise SurgeryError(
            f"{orig.name} is being written right now (it changed during a {settle * 1000:.0f} ms settle check): "
            "a live Claude Code is appending; stop it (or wait) and apply again"
        )
    data = check_descends(orig, meta)
    size = meta["size"]
    tail = data[size:]
    discarded_lines = tail.count(b"\n") + (1 if tail and not tail.endswith(b"\n") else 0)
    with open(pend, "rb") as fh:
        new = fh.read()
    before = verify_file(orig, data=data[:size])
    after = verify_file(pend, data=new)
    added = new_errors(before, after)
    if added:
        raise SurgeryError(f"the pending copy fails verify where the original did not: {added[0]}"
                           + (f" (+{len(added) - 1} more)" if len(added) > 1 else ""))
    report = ApplyReport(str(orig), str(pend), dry_run, None, len(data), len(new), discarded_lines,
                         len(tail), before.counts()["error"], after.counts()["error"], False,
                         list(meta.get("passes") or []))
    if dry_run:
        return report
    _crash("checked")
    if os.stat(orig).st_size != len(data):
        raise SurgeryError(f"{orig.name} grew while apply was checking it: a live Claude Code is appending; "
                           "stop it and apply again")
    if backup:
        bak = next_backup(orig)
        try:
            os.link(orig, bak)  # the original inode itself: instant, and whole
        except OSError:
            write_atomic(bak, data)
        report.backup = str(bak)
    _crash("backup")
    write_atomic(orig, new, before_replace=lambda: _crash("temp"))
    _crash("swapped")
    if report.backup:
        try:
            os.chmod(report.backup, FILE_MODE)  # the old inode, now only the backup
        except OSError:
            pass
    for p in (pend, meta_path(orig)):
        try:
            os.unlink(p)
        except OSError:
            pass
    report.applied = True
    return report
