"""Undo the last applied surgery of a session: put its backup back.

The checks are apply's, turned around:

- the session's last swap (the swap journal's newest entry, with its
  ``surgeries`` rows when the catalog has them; the catalog's newest row for
  a fork or an older txdb's apply) names the surgery and the backup it
  left; a fork (a new file, no backup) is not undone but deleted,
  and a surgery applied with ``--no-backup`` has nothing to restore;
- the session must still be exactly the file that surgery wrote (its size
  and sha256 as logged): a session Claude Code appended to since would lose
  those lines, so undo refuses and says so;
- no pending copy waits beside it (it was taken of the file undo replaces);
- the backup must be the file the swap kept (its size and sha256 as the
  journal recorded them): anything else is refused with what differs,
  unless ``force``, which then returns verify's verdict on it;
- the settle check (no live writer), and the backup must be whole lines,
  verify with no chain error the current file lacks, and (apply's sidecar
  check) name no sidecar file that is gone, unless the current file does too.

Then the current file is kept as a backup of its own (``.bak.N``), the old
backup is written in its place (``write_atomic``, the last-moment check that
nothing changed meanwhile; its journal entry is written before it), the
catalog refreshed and an ``undo`` row logged (with its own backup, so
running undo again redoes the surgery). A catalog that cannot be written
then leaves ``catalog_error`` on a successful report.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from txdb.model import sidecar
from txdb.errors import SurgeryError
from txdb.model.paths import backup_number, session_stem
from txdb.model.regular import open_regular
from txdb.model.verify import verify_file
from txdb.model import journal
from txdb.surgery import log
from txdb.surgery import pending as pend
from txdb.model.lock import session_lock
from txdb.model.durability import owner_of, write_atomic


@dataclass
class UndoReport:
    original: str
    restored_from: str      # the backup put back
    backup: str | None      # where the replaced file is kept
    size_before: int
    size_after: int
    undid: list[int] = field(default_factory=list)  # surgeries rows undone (one per pass of the apply)
    commands: list[str] = field(default_factory=list)
    dry_run: bool = False
    applied: bool = False
    surgery_id: int | None = None
    forced: str | None = None       # --force: what differed between the backup and the file the swap kept
    verdict: dict | None = None     # --force: verify's report on the backup restored
    catalog_error: str | None = None  # restored, but the catalog could not be updated
    # sidecar files the undone surgery wrote (named by the file replaced, not by
    # the backup restored): kept, as every surgery keeps what it saved (nothing
    # lost; the replaced file, kept as a backup, names them: undo again redoes it)
    sidecars_kept: int = 0
    sidecars_folder: str | None = None
    warnings: list[str] = field(default_factory=list)  # journal entries disregarded (not txdb's)

    def as_dict(self) -> dict:
        return asdict(self)


def _last_surgery(conn: sqlite3.Connection, orig: Path) -> dict | None:
    names = sorted({str(orig), str(orig.resolve())})
    cur = conn.execute(
        f"SELECT id, command, arguments, backup_path, result_size, result_sha256, tokens_before, tokens_after, at "
        f"FROM surgeries WHERE path IN ({','.join('?' * len(names))}) ORDER BY id DESC LIMIT 1", names)
    row = cur.fetchone()
    if row is None:
        return None
    last = dict(zip([d[0] for d in cur.description], row))
    try:
        args = orjson.loads(last["arguments"] or "{}")
    except orjson.JSONDecodeError:
        args = {}
    last["arguments"] = args if isinstance(args, dict) else {}
    return last


def _fit_of(conn: sqlite3.Connection, orig: Path, data: bytes) -> list[float] | None:
    """The fit the newest logged surgery that wrote exactly ``data`` priced
    it at (``[overhead, factor]``): what the file restored is priced at
    again (a redo reads what the surgery it redoes read), as the catalog
    and a fresh one (from the journal) read it back; None when no logged
    surgery wrote it (the original before any surgery)."""
    names = sorted({str(orig), str(orig.resolve())})
    try:
        row = conn.execute(
            f"SELECT fit_overhead, fit_factor FROM surgeries WHERE path IN ({','.join('?' * len(names))}) "
            "AND result_size = ? AND result_sha256 = ? AND fit_factor IS NOT NULL ORDER BY id DESC LIMIT 1",
            [*names, len(data), pend.sha256(data)]).fetchone()
    except sqlite3.OperationalError:
        return None  # a catalog that cannot be read: the file's own figures
    return [row[0], row[1]] if row else None


def _from_entry(e: dict, row: dict | None) -> dict:
    rows = e.get("rows") or [{}]
    return {"id": row["id"] if row else None, "command": ", ".join(r.get("command") or e["command"] for r in rows),
            "arguments": {}, "backup_path": e.get("backup"), "result_size": e.get("result_size"),
            "result_sha256": e.get("result_sha256"), "tokens_before": rows[0].get("tokens_before"),
            "tokens_after": rows[-1].get("tokens_after"), "at": e.get("at"), "swap": e["id"],
            "backup_size": e.get("backup_size"), "backup_sha256": e.get("backup_sha256"),
            "backup_lines": e.get("backup_lines")}


def last_swap(conn: sqlite3.Connection, orig: Path, entries: list[dict]) -> dict | None:
    """The session's last swap: the newest of the swap journal's ``entries``
    that stand (``log.catch_up``), joined to its catalog row when the catalog
    has it; the catalog's newest row alone for a surgery the journal does
    not hold (a fork, an older txdb's apply)."""
    try:
        row = _last_surgery(conn, orig)
    except sqlite3.OperationalError as e:
        if not log.catalog_failed(e):
            raise
        row = None
    if not entries:
        return row
    e = entries[-1]
    swap = row["arguments"].get("swap") if row else None
    if row is None or swap == e["id"]:
        return _from_entry(e, row)
    if swap in {x["id"] for x in entries} or (swap is None and (row["at"] or "") <= (e.get("at") or "")):
        return _from_entry(e, None)  # the journal is newer than the log
    return row


def _undone_rows(conn: sqlite3.Connection, orig: Path, last: dict) -> list[tuple[int, str]]:
    names = sorted({str(orig), str(orig.resolve())})
    ph = ','.join('?' * len(names))
    try:
        if last.get("swap"):
            return conn.execute(f"SELECT id, command FROM surgeries WHERE path IN ({ph}) AND json_valid(arguments) "
                                "AND json_extract(arguments, '$.swap') = ? ORDER BY id",
                                [*names, last["swap"]]).fetchall()
        return conn.execute(f"SELECT id, command FROM surgeries WHERE backup_path = ? AND path IN ({ph}) "
                            "ORDER BY id", [last["backup_path"], *names]).fetchall()
    except sqlite3.OperationalError as e:
        if not log.catalog_failed(e):
            raise
        return []


def _lines(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _check_backup(orig: Path, bak: Path, sha: str, lines: int, size: int, last: dict, what: str) -> str | None:
    """What differs between the backup now (its sha256, lines, size) and the file the swap kept (None: the same)."""
    if last.get("backup_sha256") is None:  # (a journal entry always has it: journal.problem)
        return (f"neither the swap journal ({journal.journal_path(orig).name}) nor the catalog's log records "
                f"the sha256 of the backup {bak.name} that {what} kept, so undo cannot tell it is the file "
                "that was replaced")
    if size == last["backup_size"] and sha == last["backup_sha256"]:
        return None
    then = (f"{last['backup_lines']:,} lines, " if last.get("backup_lines") is not None else "") + \
        f"{last['backup_size']:,} bytes"
    how = "it is empty" if not size else "it was changed"
    return (f"the backup {bak.name} is not the file {what} replaced: {how} ({lines:,} lines, "
            f"{size:,} bytes, sha256 {sha[:12]} now; {then}, sha256 {last['backup_sha256'][:12]} then)")


def undo(conn: sqlite3.Connection, path: str | Path, *, dry_run: bool = False, force: bool = False,
         settle: float = pend.SETTLE_SECONDS) -> UndoReport:
    orig = pend.own_session_path(path)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    with session_lock(orig):
        warnings: list[str] = []
        standing = log.catch_up(conn, orig, warnings)
        if standing is None:
            journal.read(orig)  # raises: the journal cannot be read
        report = _undo(conn, orig, standing, dry_run=dry_run, force=force, settle=settle)
        report.warnings = warnings
        return report


def _undo(conn: sqlite3.Connection, orig: Path, standing: list[dict], *, dry_run: bool, force: bool,
          settle: float) -> UndoReport:
    last = last_swap(conn, orig, standing)
    if last is None:
        raise SurgeryError(f"no surgery of {orig.name} is logged in this catalog or its swap journal: nothing to undo")
    args = last["arguments"]
    what = (f"surgery #{last['id']} ({last['command']}, {last['at']})" if last["id"] is not None
            else f"the swap of {last['at']} ({last['command']}, not in the catalog yet)")
    if last["backup_path"] is None:
        if args.get("forked_from"):
            raise SurgeryError(f"{orig.name} is a fork written by {last['command']} from {args['forked_from']}; "
                               f"the original is untouched, so there is nothing to undo: delete the fork instead "
                               f"(rm {orig}"
                               + (f", and its folder {folder}" if (folder := orig.with_suffix("")).is_dir() else "")
                               + ")")
        raise SurgeryError(f"the last {what} kept no backup (--no-backup): nothing to restore")
    bak = Path(last["backup_path"])
    if backup_number(orig, bak) is None:  # a forged journal or log row: never read a file from elsewhere
        raise SurgeryError(f"the backup {what} names ({bak}) is not one of {orig.name}'s own (a .bak beside it): "
                           "undo restores only those; nothing was changed")
    if bak.is_symlink() or not bak.is_file():
        raise SurgeryError(f"the backup of {what} is gone ({bak}): nothing to restore")
    if last["result_size"] is None or last["result_sha256"] is None:
        raise SurgeryError(f"the catalog's log does not record the size and sha256 of what {what} wrote (and the "
                           f"swap journal holds no entry for it): undo cannot tell that "
                           f"{orig.name} is unchanged since; restore {bak} by hand if you are sure")
    stale = log.applied_pending(orig, standing[-1] if standing else None)  # an apply killed before removing it
    if os.path.lexists(pend.pending_path(orig)) and not stale:
        raise SurgeryError(f"a pending copy ({pend.pending_path(orig).name}) was taken of the file undo would "
                           f"replace: apply it or delete it (and its .json) first")
    st1 = pend.file_state(orig)
    time.sleep(settle)
    if pend.file_state(orig) != st1:
        raise pend.being_written(orig, settle)
    with open_regular(orig) as fh:
        data = fh.read()
        seen = os.fstat(fh.fileno())
    size, sha = last["result_size"], last["result_sha256"]
    if len(data) != size or pend.sha256(data) != sha:
        if len(data) > size and pend.sha256(data[:size]) == sha:
            raise SurgeryError(f"{orig.name} grew by {len(data) - size:,} bytes since {what} (Claude Code "
                               f"wrote to it): undo would lose them; nothing was changed")
        raise SurgeryError(f"{orig.name} is no longer the file {what} wrote ({len(data):,} bytes now, "
                           f"{size:,} then): it was changed since; nothing was changed")
    with open_regular(bak, follow=False) as fh:
        # The backup is hashed as it is read in chunks: one that is not the file kept (a huge one
        # planted at its name, say) is refused without being held in memory.
        kept = os.fstat(fh.fileno()).st_size
        differs = _check_backup(orig, bak, *pend.digest(fh.fileno(), kept), kept, last, what)
        old = fh.read() if differs is None or force else b""
    verdict = None
    if differs is not None:
        if not force:
            raise SurgeryError(f"{differs}; nothing was changed: `txdb undo --force` restores it anyway, "
                               "after showing verify's verdict on it")
        verdict = verify_file(bak, data=old)
    if pend.complete_prefix(old) != len(old):
        raise SurgeryError(f"the backup {bak.name} ends in an unfinished line: not a whole session; "
                           "nothing was changed")
    added = pend.new_errors(verify_file(orig, data=data), verdict or verify_file(bak, data=old))
    if added:
        raise SurgeryError(f"the backup {bak.name} fails verify where the current file does not: {added[0]}")
    # apply's sidecar check: a marker of the backup whose file was deleted since would point at nothing.
    pend._check_sidecars(orig, pend._missing_sidecars(orig, data), old, what=f"the backup {bak.name}",
                         advice="restoring it would leave its marker pointing at nothing; nothing was changed")
    undone = _undone_rows(conn, orig, last)
    report = UndoReport(str(orig), str(bak), None, len(data), len(old), [r[0] for r in undone],
                        [r[1] for r in undone], dry_run, forced=differs, verdict=verdict and verdict.as_dict())
    if not undone:
        report.commands = last["command"].split(", ")
    sid = session_stem(orig)
    wrote = sidecar.reachable(data, orig, sid) - sidecar.reachable(old, orig, sid)
    report.sidecars_kept = len(wrote)
    report.sidecars_folder = str(sidecar.session_dir(orig, sid)) if wrote else None
    if dry_run:
        return report
    if pend._fingerprint(os.stat(orig)) != pend._fingerprint(seen):
        raise pend.being_written(orig, settle)
    keep = pend.next_backup(orig)
    owner, mode = owner_of(seen), stat.S_IMODE(seen.st_mode)
    try:
        os.link(orig, keep)
    except OSError:
        write_atomic(keep, data, mode=mode, owner=owner)

    def last_check():
        if pend._fingerprint(os.stat(orig)) != pend._fingerprint(seen):
            raise SurgeryError(f"{orig.name} changed while undo was writing: a live Claude Code is appending; "
                               "nothing was changed")

    log_args = {"undid": report.undid, "commands": report.commands, "restored": str(bak)}
    if last.get("swap"):
        log_args["undid_swap"] = last["swap"]
    if differs is not None:
        log_args["forced"] = differs
    entry = journal.entry(orig, "undo", backup=str(keep), backup_size=len(data), backup_sha256=pend.sha256(data),
                          backup_lines=_lines(data), result_size=len(old), result_sha256=pend.sha256(old),
                          rows=[{"command": "undo", "arguments": log_args, "records_changed": None,
                                 "tokens_before": last["tokens_after"], "tokens_after": last["tokens_before"],
                                 "fit": _fit_of(conn, orig, old)}])
    previous = None
    try:
        previous = journal.record(orig, entry, standing)  # durable before the rename
        write_atomic(orig, old, mode=mode, owner=owner, before_replace=last_check)
    except BaseException:
        if pend._fingerprint(os.stat(orig))[:2] != pend._fingerprint(seen)[:2]:
            raise  # the rename happened: the journal and the kept file stand
        if previous is not None:
            journal.take_back(orig, previous)
        try:
            os.unlink(keep)
        except OSError:
            pass
        raise
    report.backup, report.applied = str(keep), True
    if stale:
        for p in (pend.pending_path(orig), pend.meta_path(orig)):
            try:
                os.unlink(p)
            except OSError:
                pass
    try:
        ids = log.log_entry(conn, orig, entry)
        report.surgery_id = ids[0] if ids else None
    except sqlite3.OperationalError as e:
        if not log.catalog_failed(e):
            raise
        report.catalog_error = str(e)
    return report
