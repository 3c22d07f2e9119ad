"""The surgery log: every applied surgery (and every fork) as rows of the
``surgeries`` table, and the catalog refreshed for the file it changed.

A pending copy remembers the passes that produced it (command, arguments,
records changed, estimated tokens before/after, see ``engine.run_surgery``)
in its sidecar; ``apply_logged`` applies it with every check of
``pending.apply`` and then writes one ``surgeries`` row per pass, all with
the apply's time and backup. A pending copy with no recorded pass (made by
``txdb snapshot`` alone, or by an older txdb) is logged as one ``apply`` row
whose figures are computed from the two files.
"""

from __future__ import annotations

import collections
import sqlite3
from ..records import now_timestamp
from pathlib import Path

import orjson

from .. import estimate
from ..db import transaction
from ..ingest.store import catalogued_path, refresh_path
from ..errors import SurgeryError
from . import pending as pend
from .engine import SurgeryReport
from .lock import session_lock
from .usage import context_estimator
from .transcript import Transcript


def _file_row(conn: sqlite3.Connection, path: str | Path) -> tuple[int | None, str | None]:
    row = conn.execute("SELECT id, session_id FROM files WHERE path = ?",
                       (catalogued_path(conn, path) or str(Path(path).resolve()),)).fetchone()
    return (row[0], row[1]) if row else (None, None)


def _insert(conn: sqlite3.Connection, rows: list[tuple]) -> list[int]:
    ids = []
    with transaction(conn):
        for r in rows:
            cur = conn.execute(
                "INSERT INTO surgeries (at, command, arguments, session_id, file_id, path, backup_path, "
                "records_changed, tokens_before, tokens_after, result_size, result_sha256, stale_from) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", r)
            ids.append(cur.lastrowid)
        # The calibration leaves out the turns a logged pass made stale
        # (surgeries.stale_from): refresh stored the estimate before the row.
        for fid in {r[4] for r in rows if r[4] is not None}:
            estimate.store_session_estimate(conn, fid)
    return ids


def _fallback_pass(orig: Path) -> dict:
    """Figures for a pending copy no command recorded (``txdb snapshot`` alone)."""
    meta = pend.read_meta(orig) or {}
    with open(orig, "rb") as fh:
        before = Transcript.from_bytes(fh.read()[: meta.get("size", 0)], orig)
    after = Transcript.load(pend.pending_path(orig))
    kept = collections.Counter(ln.raw for ln in after.lines)
    changed = 0
    for ln in before.lines:  # lines of the original not found unchanged in the copy
        if kept[ln.raw]:
            kept[ln.raw] -= 1
        else:
            changed += 1
    return {"command": "apply", "arguments": {}, "records_changed": changed,
            "tokens_before": (calibrated := context_estimator(before))(before), "tokens_after": calibrated(after)}


def apply_logged(conn: sqlite3.Connection, path: str | Path, *, dry_run: bool = False, backup: bool = True,
                 settle: float = pend.SETTLE_SECONDS) -> tuple[pend.ApplyReport, list[int]]:
    """``pending.apply`` + refresh of the file + its ``surgeries`` rows.

    Returns (report, ids of the rows written). A refusal raises
    ``SurgeryError`` (no file changed, nothing logged); ``dry_run`` logs nothing.
    """
    orig = pend.original_path(path)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    with session_lock(orig):
        return _apply_logged(conn, orig, dry_run=dry_run, backup=backup, settle=settle)


def _apply_logged(conn: sqlite3.Connection, orig: Path, *, dry_run: bool, backup: bool,
                  settle: float) -> tuple[pend.ApplyReport, list[int]]:
    fallback = None
    meta = pend.read_meta(orig)
    if not dry_run and meta is not None and not meta.get("passes") and pend.pending_path(orig).is_file():
        fallback = _fallback_pass(orig)
    rep = pend.apply(orig, dry_run=dry_run, backup=backup, settle=settle)
    if not rep.applied:
        return rep, []
    refresh_path(conn, orig)
    file_id, session_id = _file_row(conn, orig)
    at = now_timestamp()
    passes = rep.passes or ([fallback] if fallback else [])
    rows = []
    for p in passes:
        args = dict(p.get("arguments") or {})
        if p.get("at"):
            args.setdefault("pass_at", p["at"])
        rows.append((at, p.get("command") or "apply", orjson.dumps(args).decode(), session_id, file_id,
                     str(orig), rep.backup, p.get("records_changed"), p.get("tokens_before"),
                     p.get("tokens_after"), rep.size_after, rep.result_sha256, p.get("stale_from")))
    return rep, _insert(conn, rows)


def log_fork(conn: sqlite3.Connection, report: SurgeryReport, arguments: dict | None = None) -> list[int]:
    """A fork is written directly (no apply): refresh the new file and log it."""
    if not (report.written and report.fork_session_id):
        return []
    refresh_path(conn, report.target)
    file_id, session_id = _file_row(conn, report.target)
    args = dict(arguments or {})
    args.setdefault("forked_from", report.original)
    return _insert(conn, [(now_timestamp(), report.operation, orjson.dumps(args).decode(),
                           session_id or report.fork_session_id, file_id, report.target, None,
                           report.changed_lines, report.tokens_before, report.tokens_after,
                           *_size_sha(report.target), report.stale_from)])


def _size_sha(path: str | Path) -> tuple[int | None, str | None]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None, None
    return len(data), pend.sha256(data)
