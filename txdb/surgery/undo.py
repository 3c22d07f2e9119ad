"""Undo the last applied surgery of a session: put its backup back.

The checks are apply's, turned around:

- the session's newest row in ``surgeries`` names the surgery and the
  backup it left; a fork (a new file, no backup) is not undone but deleted,
  and a surgery applied with ``--no-backup`` has nothing to restore;
- the session must still be exactly the file that surgery wrote (its size
  and sha256 as logged): a session Claude Code appended to since would lose
  those lines, so undo refuses and says so;
- no pending copy waits beside it (it was taken of the file undo replaces);
- the settle check (no live writer), and the backup must be whole lines,
  verify with no chain error the current file lacks, and (apply's sidecar
  check) name no sidecar file that is gone, unless the current file does too.

Then the current file is kept as a backup of its own (``.bak.N``), the old
backup is written in its place (``write_atomic``, the last-moment check that
nothing changed meanwhile), the catalog refreshed and an ``undo`` row logged
(with its own backup, so running undo again redoes the surgery).
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from ..db import transaction
from ..errors import SurgeryError
from ..ingest.store import refresh_path
from ..records import now_timestamp
from ..verify import verify_file
from . import pending as pend
from .lock import session_lock
from .transcript import owner_of, write_atomic


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
    return dict(zip([d[0] for d in cur.description], row))


def undo(conn: sqlite3.Connection, path: str | Path, *, dry_run: bool = False,
         settle: float = pend.SETTLE_SECONDS) -> UndoReport:
    orig = pend.original_path(path)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    with session_lock(orig):
        return _undo(conn, orig, dry_run=dry_run, settle=settle)


def _undo(conn: sqlite3.Connection, orig: Path, *, dry_run: bool, settle: float) -> UndoReport:
    last = _last_surgery(conn, orig)
    if last is None:
        raise SurgeryError(f"no surgery of {orig.name} is logged in this catalog: nothing to undo")
    args = orjson.loads(last["arguments"] or "{}") if last["arguments"] else {}
    what = f"surgery #{last['id']} ({last['command']}, {last['at']})"
    if last["backup_path"] is None:
        if isinstance(args, dict) and args.get("forked_from"):
            raise SurgeryError(f"{orig.name} is a fork written by {last['command']} from {args['forked_from']}; "
                               f"the original is untouched, so there is nothing to undo: delete the fork instead "
                               f"(rm {orig}"
                               + (f", and its folder {folder}" if (folder := orig.with_suffix("")).is_dir() else "")
                               + ")")
        raise SurgeryError(f"the last {what} kept no backup (--no-backup): nothing to restore")
    bak = Path(last["backup_path"])
    if bak.is_symlink() or not bak.is_file():
        raise SurgeryError(f"the backup of {what} is gone ({bak}): nothing to restore")
    if last["result_size"] is None or last["result_sha256"] is None:
        raise SurgeryError(f"the log does not record what {what} wrote (an older txdb): undo cannot tell that "
                           f"{orig.name} is unchanged since; restore {bak} by hand if you are sure")
    if pend.pending_path(orig).exists():
        raise SurgeryError(f"a pending copy ({pend.pending_path(orig).name}) was taken of the file undo would "
                           f"replace: apply it or delete it (and its .json) first")
    st1 = pend.file_state(orig)
    time.sleep(settle)
    if pend.file_state(orig) != st1:
        raise pend.being_written(orig, settle)
    with open(orig, "rb") as fh:
        data = fh.read()
        seen = os.fstat(fh.fileno())
    size, sha = last["result_size"], last["result_sha256"]
    if len(data) != size or pend.sha256(data) != sha:
        if len(data) > size and pend.sha256(data[:size]) == sha:
            raise SurgeryError(f"{orig.name} grew by {len(data) - size:,} bytes since {what} (Claude Code "
                               f"wrote to it): undo would lose them; nothing was changed")
        raise SurgeryError(f"{orig.name} is no longer the file {what} wrote ({len(data):,} bytes now, "
                           f"{size:,} then): it was changed since; nothing was changed")
    with open(bak, "rb") as fh:
        old = fh.read()
    if pend.complete_prefix(old) != len(old):
        raise SurgeryError(f"the backup {bak.name} ends in an unfinished line: not a whole session; "
                           "nothing was changed")
    added = pend.new_errors(verify_file(orig, data=data), verify_file(bak, data=old))
    if added:
        raise SurgeryError(f"the backup {bak.name} fails verify where the current file does not: {added[0]}")
    # apply's sidecar check: a marker of the backup whose file was deleted since would point at nothing.
    pend._check_sidecars(orig, pend._missing_sidecars(orig, data), old, what=f"the backup {bak.name}",
                         advice="restoring it would leave its marker pointing at nothing; nothing was changed")
    names = sorted({str(orig), str(orig.resolve())})
    undone = conn.execute(
        f"SELECT id, command FROM surgeries WHERE backup_path = ? AND path IN ({','.join('?' * len(names))}) "
        f"ORDER BY id", [last["backup_path"], *names]).fetchall()
    report = UndoReport(str(orig), str(bak), None, len(data), len(old), [r[0] for r in undone],
                        [r[1] for r in undone], dry_run)
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

    try:
        write_atomic(orig, old, mode=mode, owner=owner, before_replace=last_check)
    except BaseException:
        try:
            os.unlink(keep)
        except OSError:
            pass
        raise
    report.backup, report.applied = str(keep), True
    refresh_path(conn, orig)
    row = conn.execute("SELECT id, session_id FROM files WHERE path IN "
                       f"({','.join('?' * len(names))}) LIMIT 1", names).fetchone()
    file_id, session_id = (row[0], row[1]) if row else (None, None)
    log_args = {"undid": report.undid, "commands": report.commands, "restored": str(bak)}
    with transaction(conn):
        cur = conn.execute(
            "INSERT INTO surgeries (at, command, arguments, session_id, file_id, path, backup_path, records_changed, "
            "tokens_before, tokens_after, result_size, result_sha256) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (now_timestamp(), "undo", orjson.dumps(log_args).decode(), session_id, file_id, str(orig), str(keep),
             None, last["tokens_after"], last["tokens_before"], len(old), pend.sha256(old)))
    report.surgery_id = cur.lastrowid
    return report
