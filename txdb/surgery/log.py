"""The surgery log: every applied surgery (and every fork) as rows of the
``surgeries`` table, and the catalog refreshed for the file it changed.

A pending copy remembers the passes that produced it (command, arguments,
records changed, estimated tokens before/after, see ``engine.run_surgery``)
in its sidecar; ``apply_logged`` applies it with every check of
``pending.apply`` and then writes one ``surgeries`` row per pass, all with
the apply's time and backup. A pending copy with no recorded pass (made by
``txdb snapshot`` alone, or by an older txdb) is logged as one ``apply`` row
whose figures are computed from the two files.

The record of a swap is the swap journal (``journal``), written before the
rename; the rows are written after it. A catalog that cannot be written
then (a full disk, a read-only file) does not undo the swap: the report
carries ``catalog_error`` and ``catch_up`` (run by the next apply, undo or
refresh of that session) logs what the journal holds and the log lacks.
"""

from __future__ import annotations

import collections
import sqlite3
from txdb.model.records import now_timestamp
from pathlib import Path

import orjson

from txdb.catalog import db, estimate
from txdb.catalog.sqlutil import transaction
from txdb.catalog.ingest.store import catalogued_path, journalled_sessions, refresh_path
from txdb.errors import SurgeryError
from txdb.model import journal
from txdb.surgery import pending as pend
from txdb.surgery.engine import SurgeryReport
from txdb.model.lock import session_lock
from txdb.model.regular import open_regular
from txdb.surgery.usage import context_estimator, result_estimator
from txdb.model.transcript import Transcript


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
                "records_changed, tokens_before, tokens_after, result_size, result_sha256, stale_from, "
                "fit_overhead, fit_factor) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", r)
            ids.append(cur.lastrowid)
    return ids


def _fallback_pass(orig: Path) -> dict:
    """Figures for a pending copy no command recorded (``txdb snapshot`` alone)."""
    meta = pend.read_meta(orig) or {}
    with open_regular(orig) as fh:
        before = Transcript.from_bytes(fh.read()[: meta.get("size", 0)], orig)
    before.logged_factor = journal.logged_factor(orig, meta.get("size"), meta.get("sha256"))
    after = Transcript.from_bytes(pend.read_pending(orig, meta or None), pend.pending_path(orig))
    kept = collections.Counter(ln.raw for ln in after.lines)
    changed = 0
    for ln in before.lines:  # lines of the original not found unchanged in the copy
        if kept[ln.raw]:
            kept[ln.raw] -= 1
        else:
            changed += 1
    calibrated = context_estimator(before)
    priced = result_estimator(calibrated)(after)
    return {"command": "apply", "arguments": {}, "records_changed": changed,
            "tokens_before": calibrated(before), "tokens_after": priced(after),
            "fit": list(priced.line_at(after))}


def catalog_failed(e: BaseException) -> bool:
    """Whether ``e`` is the catalog refusing a write for the machine's sake
    (full disk, read-only, locked, I/O error), not a bug of ours."""
    return isinstance(e, sqlite3.OperationalError) and str(e) in db.MACHINE_CONDITIONS


def _names(orig: Path) -> list[str]:
    return sorted({str(orig), str(orig.resolve())})


def logged_swaps(conn: sqlite3.Connection, orig: Path) -> set[str]:
    """The swap journal ids the catalog's ``surgeries`` rows of ``orig`` carry."""
    names = _names(orig)
    return {r[0] for r in conn.execute(
        f"SELECT json_extract(arguments, '$.swap') FROM surgeries WHERE path IN ({','.join('?' * len(names))}) "
        "AND json_valid(arguments)", names) if r[0]}


def log_entry(conn: sqlite3.Connection, orig: Path, e: dict) -> list[int]:
    """Refresh the session and write the ``surgeries`` rows of one journal entry."""
    return log_entries(conn, orig, [e])


def log_entries(conn: sqlite3.Connection, orig: Path, entries: list[dict]) -> list[int]:
    """Refresh the session once and write the ``surgeries`` rows of journal
    entries in one transaction (a planted journal of thousands of entries
    costs one estimate, not one each)."""
    refresh_path(conn, orig)
    file_id, session_id = _file_row(conn, orig)
    rows = [(e["at"], r.get("command") or e["command"],
             orjson.dumps({**(r.get("arguments") or {}), "swap": e["id"]}).decode(), session_id, file_id,
             str(orig), e.get("backup"), r.get("records_changed"), r.get("tokens_before"), r.get("tokens_after"),
             e["result_size"], e["result_sha256"], r.get("stale_from"), *_fit(r.get("fit")))
            for e in entries for r in e.get("rows") or [{}]]
    return _insert(conn, rows)


def catch_up(conn: sqlite3.Connection, orig: str | Path, warnings: list[str] | None = None) -> list[dict] | None:
    """Log the swaps of ``orig``'s journal the catalog lacks. Returns the
    entries that stand, for the next ``journal.record``: the newest entry
    is left out when its swap never happened (killed before its rename: the
    session does not begin with what it wrote) and the catalog lacks it;
    once every entry is logged, only the newest. Writes only the catalog,
    best effort (one that cannot be written keeps every entry for next
    time); None when the journal cannot be read (``record`` refuses it).
    Entries that are not txdb's are disregarded, each named in ``warnings``.
    Call it under the session lock."""
    orig = Path(orig)
    try:
        entries, bad = journal.load(orig)
    except SurgeryError:
        return None
    if warnings is not None:
        warnings.extend(bad)
    if not entries:
        return []
    try:
        logged = logged_swaps(conn, orig)
    except sqlite3.OperationalError as e:
        if not catalog_failed(e):
            raise
        return entries
    keep = list(entries)
    if keep[-1]["id"] not in logged and not journal.matches(orig, keep[-1]):
        keep.pop()
    try:
        if missing := [e for e in keep if e["id"] not in logged]:
            log_entries(conn, orig, missing)
    except sqlite3.OperationalError as e:
        if not catalog_failed(e):
            raise
        return keep
    return keep[-1:]


def catch_up_journals(conn: sqlite3.Connection, sessions: list[Path] | None = None,
                      warnings: list[str] | None = None) -> int:
    """``catch_up`` every catalogued session (or those of ``sessions``) whose
    swap journal holds a swap the ``surgeries`` log lacks (an apply or undo killed after its rename, or
    one whose catalog could not be written): what ``txdb refresh`` runs
    after reading the files. A session another txdb command holds is left
    for next time; a journal that cannot be read, or an entry of one that
    is not txdb's, is named in ``warnings`` and never stops the others.
    Returns how many log rows it wrote."""
    from txdb.errors import TxdbError

    before = conn.execute("SELECT count(*) FROM surgeries").fetchone()[0]
    if sessions is None:
        sessions = journalled_sessions(conn)
    # A journal that now prices its unchanged session otherwise (written
    # beside it since): the estimate follows (refresh itself rechecks those
    # priced at a journal already).
    with transaction(conn):
        estimate.recheck_logged(conn, map(str, sessions))
    for orig in sessions:
        try:
            entries, bad = journal.load(orig)
        except SurgeryError as e:
            if warnings is not None:
                warnings.append(str(e))
            continue
        if warnings is not None:
            warnings.extend(bad)
        try:
            if not entries or {e["id"] for e in entries} <= logged_swaps(conn, orig):
                continue
            with session_lock(orig):
                catch_up(conn, orig)
        except (TxdbError, OSError):
            continue  # busy, unreadable or vanished: the next refresh, apply or undo tries again
    return conn.execute("SELECT count(*) FROM surgeries").fetchone()[0] - before


def applied_pending(orig: Path, e: dict | None) -> bool:
    """``pending.applied_copy``: the copy beside ``orig`` is what journal entry ``e``'s apply swapped in."""
    return pend.applied_copy(orig, e)


def apply_logged(conn: sqlite3.Connection, path: str | Path, *, dry_run: bool = False, backup: bool = True,
                 settle: float = pend.SETTLE_SECONDS,
                 settled: tuple[int, int] | None = None) -> tuple[pend.ApplyReport, list[int]]:
    """``pending.apply`` + refresh of the file + its ``surgeries`` rows
    (``settled``: the file's state at the end of the caller's settle check).

    Returns (report, ids of the rows written). A refusal raises
    ``SurgeryError`` (no file changed, nothing logged); ``dry_run`` logs
    nothing. A catalog that cannot be written after the swap is no refusal:
    the report's ``catalog_error`` says why, the journal keeps the record.
    """
    orig = pend.own_session_path(path)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    with session_lock(orig):
        warnings: list[str] = []
        if dry_run:
            standing = None
            warnings = journal.load(orig)[1]  # refuses a journal the apply could not write over
        elif (standing := catch_up(conn, orig, warnings)) is None:
            journal.load(orig)  # raises: the journal cannot be read, so no swap can be recorded
        elif pend.drop_applied_copy(orig):
            raise SurgeryError(f"the pending copy of {orig.name} was applied already (an apply killed before it "
                               f"removed the copy; the swap journal records it): the leftover copy is removed, "
                               "nothing is left to apply")
        rep, ids = _apply_logged(conn, orig, dry_run=dry_run, backup=backup, settle=settle, standing=standing,
                                 settled=settled)
        rep.warnings = warnings
        return rep, ids


def _apply_logged(conn: sqlite3.Connection, orig: Path, *, dry_run: bool, backup: bool, settle: float,
                  standing: list[dict] | None, settled: tuple[int, int] | None) -> tuple[pend.ApplyReport, list[int]]:
    fallback = None
    meta = pend.read_meta(orig)
    if not dry_run and meta is not None and not meta.get("passes") and pend.pending_path(orig).is_file():
        fallback = _fallback_pass(orig)
    rows = journal.pass_rows(meta.get("passes") if meta else None) or journal.pass_rows([fallback] if fallback else [])
    rep = pend.apply(orig, dry_run=dry_run, backup=backup, settle=settle, rows=rows, journal_entries=standing,
                     settled=settled)
    if not rep.applied:
        return rep, []
    try:
        return rep, log_entry(conn, orig, rep.entry)
    except sqlite3.OperationalError as e:
        if not catalog_failed(e):
            raise
        rep.catalog_error = str(e)
        return rep, []


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
                           *_size_sha(report.target), report.stale_from, *_fit(report.fit))])


def _fit(value) -> tuple[float | None, float | None]:
    """A pass's logged fit (``[overhead, factor]``) as the two columns."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return float(value[0]), float(value[1])
    return None, None


def _size_sha(path: str | Path) -> tuple[int | None, str | None]:
    try:
        with open_regular(path) as fh:
            data = fh.read()
    except OSError:
        return None, None
    return len(data), pend.sha256(data)
