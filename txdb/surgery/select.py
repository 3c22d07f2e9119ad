"""Targets chosen by query: the bulk ``--where`` path of the strip commands.

``--where "<SQL condition>"`` is one SQL expression over a target view:

- ``block_targets`` (one row per content block) for ``strip-tools``,
  ``strip-thinking`` and ``strip-all``;
- ``attachment_targets`` (one row per attachment line) for
  ``strip-attachments``;
- ``image_targets`` (one row per image, or per tool_result holding images)
  for ``replace-images``: a row selects its record's images;
- ``chain_targets`` (one row per record of an active chain) for
  ``compact-range``: each run of consecutive positions selected in a
  session is one range (the leaf and tool-call rules refuse that session);
- ``sessions_by_context`` (one row per session) for ``rescue``: each
  selected session is rescued whole; main sessions only (the declaration's
  ``main_sessions``: a subagent transcript is not what ``claude -r``
  resumes), the subagents left out listed in ``Selection.subagents``.

It spans every session of the catalog. The flow (no click here; the CLI is
``txdb/cli/surgery.py``):

1. ``check_condition``: the text must be a single expression (no ``;``, no
   comment, parentheses balanced); SQLite parses it inside
   ``SELECT ... FROM <view> WHERE (<cond>)`` on a read-only connection, so a
   syntax error or an unknown column is a one-line ``QueryError``.
2. ``select_targets``: run it; every selected file whose size or mtime
   differs from what the catalog indexed (``files.size/mtime_ns``) is
   refreshed and the query re-run, until the files it selects are current.
   A row carries its file, the byte offset of its record and the record's
   uuid; the operation checks the uuid is still at that offset in the
   snapshot it edits, so a file rewritten between query and surgery is
   refused (that session only), never mis-edited.
3. ``plan``: per session, ``engine.run_surgery`` with an op restricted to
   the selected rows (tool ids, thinking ``BlockRef``s, attachment uuids):
   one pending copy per affected session, the usual preserved-thinking pass
   and usage reset, and the command + arguments remembered in the pending
   sidecar for the surgery log. One session's refusal is recorded and the
   others go on.
4. ``apply_all``: ``log.apply_logged`` on each (every check of
   ``pending.apply``, a ``surgeries`` row per pass, catalog refreshed);
   refusals are collected, not raised.

Semantics of a selected row:

- a ``tool_use`` row clears that call's input, a ``tool_result`` row its
  result (``--only-results`` / ``--only-inputs`` narrow further; ``is_error``
  results keep their text as always);
- a ``thinking`` row (thinking, redacted_thinking, wrapped ``<thinking>``
  text) removes that block; other kinds (plain text, commands) are not
  strippable and are counted, not touched;
- an attachment row drops that line: the WHERE chose it, so ``keep_recent``
  defaults to 0, but the attachment policy's safety rules still hold: keep-all types
  (``queued_command``, ``*_delta``, ``skill_listing``, hook context),
  system-prompt records and unknown types stay unless ``--drop-all --types``
  names them, and the leaf or a repeated uuid never goes.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from txdb.catalog.sessions import stale
from txdb.catalog.db import connect_readonly, run_query
from txdb.errors import QueryError, QueryRefused, SurgeryError, TxdbError
from txdb.model.paths import is_session_path
from txdb.model.regular import kind
from txdb.catalog.ingest.store import refresh_path
from txdb.model.paths import is_subagent
from txdb.surgery import pending as pend
from txdb.surgery.commands import COMMANDS
from txdb.surgery.condition import check_condition
from txdb.surgery.engine import PassOptions, SurgeryReport, run_surgery
from txdb.surgery.log import apply_logged
from txdb.surgery.results import Result
from txdb.surgery.where_ops import WhereStats

# The target view of each --where command, from its declaration.
VIEWS = {name: c.view for name, c in COMMANDS.items() if c.view}

_COLUMNS = {
    "block_targets": "file_id, path, session_id, title, offset, idx, kind, type, tool_use_id, tokens",
    "attachment_targets": "file_id, path, session_id, title, offset, NULL AS idx, 'attachment' AS kind, "
                          "type, NULL AS tool_use_id, tokens",
    "image_targets": "file_id, path, session_id, title, offset, idx, kind, 'image' AS type, tool_use_id, tokens",
    "chain_targets": "file_id, path, session_id, title, offset, NULL AS idx, 'record' AS kind, type, "
                     "NULL AS tool_use_id, tokens",
    "sessions_by_context": "file_id, path, session_id, title, NULL AS offset, NULL AS idx, 'session' AS kind, "
                           "NULL AS type, NULL AS tool_use_id, est_context_tokens AS tokens",
}

def query_rows(ro: sqlite3.Connection, view: str, cond: str) -> list[dict]:
    """The selected rows of ``view`` (with the record's uuid), in file order."""
    sql = (f"SELECT t.*, (SELECT r.uuid FROM records r WHERE r.file_id = t.file_id AND r.offset = t.offset) "
           f"AS record_uuid FROM (SELECT {_COLUMNS[view]} FROM {view} WHERE ({cond})) t "
           f"ORDER BY t.file_id, t.offset, t.idx")
    try:
        cols, values = run_query(ro, sql)  # read-only and authorized like `txdb query`; Ctrl-C stops it
    except QueryError as e:
        raise type(e)(f"--where over {view}: {'refused: ' if isinstance(e, QueryRefused) else ''}{e}") from None
    return [dict(zip(cols, r)) for r in values]


# -- selection ---------------------------------------------------------------

@dataclass
class SessionTargets:
    file_id: int
    path: str
    session_id: str | None
    title: str | None
    rows: list[dict] = field(default_factory=list)


@dataclass
class Selection:
    view: str
    condition: str
    rows: int
    sessions: list[SessionTargets]
    refreshed: list[str]
    gone: list[str]
    rounds: int
    not_sessions: list[str] = field(default_factory=list)  # catalog rows of copies, never targets
    subagents: list[str] = field(default_factory=list)  # left out: the command takes main sessions only


def select_targets(conn: sqlite3.Connection, db_path: str | Path, command: str, cond: str,
                   max_rounds: int = 5) -> Selection:
    """Run the WHERE read-only; refresh the stale files it selects and re-run it."""
    view = VIEWS[command]
    cond = check_condition(cond)
    refreshed: list[str] = []
    skipped: set[str] = set()
    subagents: set[str] = set()
    main_only = COMMANDS[command].main_sessions
    ro = connect_readonly(db_path)
    try:
        rounds = 0
        while True:
            rounds += 1
            rows = query_rows(ro, view, cond)
            # An older catalog may hold rows of a backup or a pending copy:
            # never a target (discovery's rule says what a session is).
            skipped.update(r["path"] for r in rows if not is_session_path(r["path"]))
            rows = [r for r in rows if is_session_path(r["path"])]
            if main_only:  # a subagent's transcript is not what `claude -r` resumes
                subagents.update(r["path"] for r in rows if is_subagent(r["path"]))
                rows = [r for r in rows if not is_subagent(r["path"])]
            paths = sorted({r["path"] for r in rows})
            todo = [p for p in paths if stale(conn, p)]
            if not todo:
                break
            if rounds >= max_rounds:
                raise SurgeryError(f"{len(todo)} selected file(s) keep changing while being indexed "
                                   f"({Path(todo[0]).name}, ...): a live Claude Code is writing; try again")
            for p in todo:
                refresh_path(conn, p)
                refreshed.append(p)
    finally:
        ro.close()
    by: dict[int, SessionTargets] = {}
    gone = []
    for r in rows:
        s = by.get(r["file_id"])
        if s is None:
            s = by[r["file_id"]] = SessionTargets(r["file_id"], r["path"], r["session_id"], r["title"])
        s.rows.append(r)
    sessions = []
    for s in by.values():
        if os.path.isfile(s.path):
            sessions.append(s)
        else:
            gone.append(s.path)
    return Selection(view, cond, len(rows), sessions, sorted(set(refreshed)), gone, rounds, sorted(skipped),
                     sorted(subagents))


# -- plan and apply ----------------------------------------------------------

@dataclass
class SessionOutcome:
    session_id: str | None
    title: str | None
    path: str
    rows: int
    targets: int = 0
    changed: int = 0  # blocks / attachments actually changed
    usage_lowered: int = 0  # records whose recorded usage the usage reset lowered (rewritten too)
    tokens_before: int | None = None  # estimate of the copy this pass started from
    tokens_after: int | None = None
    bytes_before: int | None = None
    bytes_after: int | None = None
    status: str = "planned"  # pending | unchanged | fork | dry-run | refused | applied | apply-refused
    error: str | None = None
    pending: str | None = None
    fork: str | None = None
    not_strippable: int = 0
    after_snapshot: int = 0
    backup: str | None = None
    surgery_ids: list[int] = field(default_factory=list)
    report: dict | None = None
    result: Result | None = field(default=None, repr=False)  # the pass's typed result (report["result"] is its JSON)

    def as_dict(self) -> dict:
        d = asdict(dataclasses.replace(self, result=None))
        del d["result"]
        return d


def plan(conn: sqlite3.Connection, selection: Selection, command: str, options: dict,
         pass_options: PassOptions | None = None,
         on_fork: Callable[[SurgeryReport], None] | None = None) -> list[SessionOutcome]:
    """One ``run_surgery`` per selected session (``options``: the command's own,
    for its declaration's op; ``pass_options``: how each pass runs, without
    positions: the condition chose the rows); refusals are recorded, not raised."""
    po = pass_options or PassOptions()
    dry_run = po.dry_run
    outcomes = []
    for s in selection.sessions:
        o = SessionOutcome(s.session_id, s.title, s.path, len(s.rows))
        stats = WhereStats()
        try:
            rep = run_surgery(s.path, command, COMMANDS[command].make_op(options, s.rows, stats), po)
        except (TxdbError, OSError, ValueError) as e:
            o.status, o.error = "refused", _one_line(e)
            o.targets = stats.targets
            outcomes.append(o)
            continue
        o.targets, o.not_strippable, o.after_snapshot = stats.targets, stats.not_strippable, stats.after_snapshot
        o.result = rep.result
        o.changed = rep.result.changed
        o.usage_lowered = (rep.usage or {}).get("capped", 0)
        # This pass only: from the copy it started from (an earlier pass's
        # pending copy, when there is one), not from the original.
        o.tokens_before, o.tokens_after = rep.tokens_base, rep.tokens_after
        o.bytes_before, o.bytes_after = rep.bytes_before, rep.bytes_after
        o.report = rep.as_dict()
        if dry_run:
            o.status = "dry-run"
        elif rep.fork_session_id:
            o.status, o.fork = "fork", rep.target
            if on_fork is not None:
                on_fork(rep)
        elif rep.written:
            o.status, o.pending = "pending", rep.target
        else:
            o.status = "unchanged"
            if pend.pending_path(s.path).is_file():
                o.pending = str(pend.pending_path(s.path))  # an earlier pass's copy, still there
        outcomes.append(o)
    return outcomes


@dataclass
class ApplyOutcome:
    path: str
    session_id: str | None
    applied: bool
    error: str | None = None
    backup: str | None = None
    size_before: int | None = None
    size_after: int | None = None
    discarded_lines: int = 0
    surgery_ids: list[int] = field(default_factory=list)
    catalog_error: str | None = None  # applied, but the catalog could not be updated
    warnings: list[str] = field(default_factory=list)  # journal entries disregarded (not txdb's)

    def as_dict(self) -> dict:
        return asdict(self)


def apply_all(conn: sqlite3.Connection, paths: list[str | Path], *, dry_run: bool = False, backup: bool = True,
              settle: float = pend.SETTLE_SECONDS) -> list[ApplyOutcome]:
    """Apply each pending copy with every check; a refusal is reported and the others go on.

    The settle check is done for all files at once (stat, one sleep, stat)
    instead of 0.4 s per file, the sleep as long as the longest any file
    needs (``pending.settle_seconds``: longer for one that grew past its
    snapshot just now); each apply must then find its file as the settle
    left it, so every file has been quiet for at least that long when its
    apply reads it, as with a single ``apply``.
    """
    out = []
    origs = []
    for p in paths:
        try:
            origs.append(pend.own_session_path(p))
        except SurgeryError as e:  # a link out of its folder: refused, the others go on
            out.append(ApplyOutcome(str(p), None, False, error=_one_line(e)))
    st = pend.file_state
    first = {p: st(p) for p in origs}
    wait = max((pend.settle_seconds(first[p], pend.read_meta(p), settle) for p in origs), default=0.0)
    if origs and wait:
        time.sleep(wait)
    settled = {p: st(p) for p in origs}
    for orig in origs:
        row = conn.execute("SELECT session_id FROM files WHERE path = ?", (str(orig),)).fetchone()
        o = ApplyOutcome(str(orig), row[0] if row else None, False)
        try:
            if not (first[orig] == settled[orig] == st(orig)):
                raise pend.being_written(orig, wait or settle)
            rep, ids = apply_logged(conn, orig, dry_run=dry_run, backup=backup, settled=settled[orig])
        except (TxdbError, OSError) as e:
            o.error = _one_line(e)
            out.append(o)
            continue
        o.applied = rep.applied
        o.backup, o.size_before, o.size_after = rep.backup, rep.size_before, rep.size_after
        o.discarded_lines, o.surgery_ids, o.catalog_error = rep.discarded_lines, ids, rep.catalog_error
        o.warnings = rep.warnings
        out.append(o)
    return out


def all_pending(conn: sqlite3.Connection, odd: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Every catalogued session file that has a pending copy (with its
    sidecar) beside it; ``odd`` gets each name ``.pending`` that holds no
    regular file (a FIFO, a folder, a dangling link) and what it is: never
    opened, named instead of passed over in silence."""
    out = []
    for (path,) in conn.execute("SELECT path FROM files ORDER BY path"):
        if not is_session_path(path):
            continue  # an older catalog's row of a backup or a pending copy
        pending = pend.pending_path(path)
        if pending.is_file() and os.path.isfile(path):
            out.append(Path(path))
        elif odd is not None and os.path.lexists(pending):
            odd.append((pending, _what_is(pending)))
    return out


def _what_is(p: Path) -> str:
    try:
        return kind(os.stat(p).st_mode)
    except OSError:
        return "a link to nothing"


def _one_line(e: BaseException) -> str:
    msg = str(e) or type(e).__name__
    if isinstance(e, OSError) and e.strerror:
        msg = f"{e.strerror}: {e.filename or ''}".rstrip(": ")
    return msg.splitlines()[0]
