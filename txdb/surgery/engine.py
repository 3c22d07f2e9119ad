"""Run one mutating operation the copy-first way.

``run_surgery(path, operation, op, PassOptions(...))``:

1. base = the pending copy when there is one (multi-pass), else a fresh
   snapshot of the original (complete lines); the original's snapshot prefix
   is the reference ("the live original") for the checks below;
2. with ``fork``: base becomes a fork (new session id, stamped);
3. ``op(t, original)`` mutates the transcript; in a fork, the records it
   created are stamped like the copied ones (``fork.stamp_created``);
4. preserved thinking: later thinking blocks the API will drop are counted,
   their text saved to sidecars (``thinking.SavedThinking``: a marker the
   CLI never sends) and removed (unless ``keep_dropped_thinking``);
5. usage reset (unless ``usage_reset=False``);
6. nothing lost (``gate``): the result must keep every record of the
   original's active chain that a pass removed on purpose, in order (a fork
   through ``forkedFrom``); else ``SurgeryError`` and nothing is written
   (``dry_run`` refuses the same way). The check reads the records' chain
   fields, which ``touch`` takes from the very objects written;
7. an op that writes files beside the session (persist's sidecars) has a
   ``write_files(owner)`` method (``ops.Op`` declares what an op is): it runs here, after the gate and before
   the pending copy (or fork) that refers to those files is written; never
   on a dry run;
8. the pending copy (or the fork file) is streamed out (``Transcript.chunks``),
   with the uuids this pass removed recorded in the sidecar for ``apply``'s
   same check; ``dry_run`` writes nothing.

The whole pass holds the session's lock (``lock.session_lock``): a second
txdb command on the same session is refused, never interleaved. Temp
files an earlier, killed txdb left beside the session are removed first.
A fork of a subagent transcript is refused: ``claude -r`` resumes
top-level sessions only.

The bulk ``--where`` path calls this per session with an ``op`` closing over
its targets (see ``ops``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from txdb.errors import SurgeryError
from txdb.model.records import now_timestamp
from txdb.surgery import fork as forkmod
from txdb.surgery import gate
from txdb.model import journal
from txdb.surgery import pending as pend
from txdb.model.lock import session_lock
from txdb.surgery.ops import Op, as_op, chain_prefix_estimates, chain_thinking, measure_at_load
from txdb.surgery.results import Result
from txdb.surgery.thinking import SavedThinking, dropped_thinking, remove_dropped
from txdb.model.transcript import Transcript
from txdb.model.durability import clean_stale_temps, owner_of, write_atomic
from txdb.model.regular import open_regular
from txdb.model import sidecar as sc
from txdb.surgery.usage import context_estimator, first_stale_uuid, reset_usage, result_estimator, stale_turns

@dataclass(frozen=True)
class PassOptions:
    """How one pass runs, beside its op: what every mutating command shares.

    ``fork``: write the result as a new session (``fork_title`` names it);
    ``usage_reset=False``: leave recorded usage as it is;
    ``keep_dropped_thinking``: keep the later thinking the API will drop;
    ``arguments``: the command's options (JSON-able), remembered with the
    pass for the surgeries log; ``positions``: --from/--to/--pos, which must
    name positions of the copy's active chain (checked before the op runs)."""

    dry_run: bool = False
    fork: bool = False
    fork_title: str | None = None
    usage_reset: bool = True
    keep_dropped_thinking: bool = False
    arguments: dict = field(default_factory=dict)
    positions: tuple[int | None, int | None] | None = None


@dataclass
class SurgeryReport:
    operation: str
    original: str
    target: str  # the pending copy or the fork file
    dry_run: bool
    written: bool = False
    fork_session_id: str | None = None
    fork_title: str | None = None
    snapshot_created: bool = False
    result: Result | dict = field(default_factory=dict)  # a declared command's typed result; a library op's dict
    dropped_thinking: dict = field(default_factory=dict)
    dropped_thinking_removed: int = 0
    dropped_thinking_saved: dict = field(default_factory=dict)  # the sidecars their text went to
    usage: dict | None = None
    stale_from: str | None = None  # the first turn whose recorded usage the pass made stale
    fit: tuple[float, float] | None = None  # (overhead, factor) the token figures used (surgeries.fit_*)
    changed_lines: int = 0
    lines: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    tokens_base: int = 0  # estimate of the copy this pass started from (the pending copy on a later pass)
    base: str = "original"  # what positions mean: "original", "pending copy" or "fork"
    leftover_removed: bool = False  # a pending copy its apply had swapped in already (killed after it), removed

    def as_dict(self) -> dict:
        res = self.result
        d = asdict(replace(self, result={}))
        d["result"] = res.as_dict() if isinstance(res, Result) else res
        return d


def load_base(path: str | Path) -> tuple[Transcript, Transcript, bool, dict]:
    """(working transcript, original snapshot, whether a pending copy exists, snapshot meta)."""
    orig = pend.original_path(path)
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    pend.check_pending_kind(orig)
    base = pend.working_file(orig)
    meta = pend.read_meta(orig)
    if base != orig:
        if meta is None:
            raise pend.unreadable_meta(orig)  # a new snapshot would overwrite the copy and its passes
        with open_regular(orig) as fh:
            data = fh.read()
        pend.check_descends(orig, meta, data)
        original = Transcript.from_bytes(data[: meta["size"]], orig, measure=measure_at_load)
        del data
        copy = Transcript.from_bytes(pend.read_pending(orig, meta), base, measure=measure_at_load)
        return copy, original, True, meta
    data, meta = pend.take_snapshot(orig)
    # Each record's recorded usage is read as the load parses it
    # (``ops.measure_at_load``), each chain record's size (its thinking, its
    # images) as the chain's estimate first asks, before the copy is made,
    # so the copy's records carry them (Record.clone): the pass sizes both
    # transcripts (the calibration on the original, the report and the usage
    # reset on the copy) and sizes each record once.
    original = Transcript.from_bytes(data, orig, measure=measure_at_load)
    chain_prefix_estimates(original)
    chain_thinking(original)
    return original.copy(pend.pending_path(orig)), original, False, meta


def run_surgery(path: str | Path, operation: str, op: Op | Callable[[Transcript, Transcript], dict | None],
                options: PassOptions | None = None) -> SurgeryReport:
    """Run ``op`` (an ``ops.Op``, or a plain ``fn(t, original)``) on the session
    at ``path`` as ``options`` say; its ``arguments`` are remembered with the
    pass in the pending copy's sidecar (``apply`` logs them in ``surgeries``),
    its ``positions`` are checked before the op runs, so nothing is written
    otherwise."""
    o = options or PassOptions()
    orig = pend.own_session_path(path)
    if o.fork:
        forkmod.check_forkable(pend.session_path(path))
    if not orig.is_file():
        raise SurgeryError(f"no session file at {orig}")
    with session_lock(orig):
        return _run_locked(orig, operation, as_op(op), o, path)


def _run_locked(orig: Path, operation: str, op: Op, o: PassOptions, path: str | Path) -> SurgeryReport:
    dry_run, fork = o.dry_run, o.fork
    arguments = _loggable(o.arguments)
    if not dry_run:
        clean_stale_temps(orig.parent)
        sc.clean_leftovers(sc.session_dir(orig))
    # An apply killed after its swap: this pass starts from what it wrote.
    leftover = not dry_run and pend.drop_applied_copy(orig)
    t, original, had_pending, meta = load_base(orig)
    report = SurgeryReport(operation, str(orig), str(pend.pending_path(orig)), dry_run)
    report.leftover_removed = leftover
    report.bytes_before = t.size
    if fork:
        # Beside the session as named: claude -r looks in the project folder, where a link lives.
        t = forkmod.make_fork(t, operation=operation, folder=pend.session_path(path).parent, title=o.fork_title)
        report.target = str(t.path)
        report.fork_session_id = t.session_id
        report.fork_title = t.records[-1].parse().get("customTitle") if t.records else None
    # Token figures are the calibrated estimate (the one `sessions` and
    # `analyze` show), fitted on the original's recorded turns, at the
    # factor the last surgery logged while the file is what it wrote.
    original.logged_factor = journal.logged_factor(orig, meta.get("size"), meta.get("sha256"))
    calibrated = context_estimator(original)
    report.tokens_before = calibrated(original)
    # A result is priced at the original's factor (result_estimator): its
    # recorded turns measured the original, the stale ones would bend its own.
    result = result_estimator(calibrated)
    # A pending copy's own estimate, as the pass that wrote it gave its tokens_after (and the catalog reads it).
    report.tokens_base = report.tokens_before if not had_pending or fork else result(t)(t)
    base_uuids = gate.uuids(t)
    report.base = "fork" if fork else "pending copy" if had_pending else "original"
    t.base = report.base  # chain positions an op reports (and --pos) are this copy's (Transcript.base)
    t.keeps_dropped_thinking = o.keep_dropped_thinking  # what an op measuring the result must count
    # An op may own its range check (compact-range: its own range again is no error).
    op.check_positions(t, o.positions)
    report.result = op(t, original) or {}
    if fork:
        forkmod.stamp_created(t)  # what the op created carries the fork's fields too
    t.refresh()
    changed = t.changed_lines()
    info = dropped_thinking(original, t)
    report.dropped_thinking = info.as_dict()
    saved = SavedThinking(shared=op if isinstance(op, sc.Writes) else None)
    if info.count and not o.keep_dropped_thinking:
        saved.plan_dropped(t, info)
        report.dropped_thinking_removed = remove_dropped(t, info).get("blocks", 0)
        saved.place(t)
        report.dropped_thinking_saved = saved.as_dict()
        t.refresh()
    if o.usage_reset and (changed or fork):
        report.usage = reset_usage(t, original)
        report.stale_from = report.usage["stale_from"]
    elif changed:
        report.stale_from = first_stale_uuid(stale_turns(t, original))
    t.refresh()
    report.changed_lines = t.changed_lines()
    report.lines = len(t.lines)
    report.bytes_after = t.byte_size()
    # The result's own estimate, as the catalog will read the written file (its
    # reset last turn the anchor, the original's factor, logged as `fit`); a
    # fork, whose turns all measured the original, by the original's fit.
    after = calibrated if fork else result(t)
    report.tokens_after = after(t)
    report.fit = after.line_at(t)  # the line through that figure (images priced apart)
    removed = base_uuids - gate.uuids(t)
    if fork:
        # A fork's record that took a fresh uuid (compact) still keeps its original.
        removed -= gate.fork_keys(t)
    # The chain of what will be written: the records' chain fields are read
    # from the very objects the changed lines are written from.
    gate.check_chain(gate.original_chain(original), t, gate.recorded_removals(meta) | removed,
                     what=f"the {'fork' if fork else 'pending copy'} ({operation})", via_fork=fork)
    if not fork and report.bytes_after > pend.copy_limit(meta["size"]):
        raise SurgeryError(f"{operation} would make a pending copy of {report.bytes_after:,} bytes, more than "
                           f"txdb makes of a {meta['size']:,}-byte session (at most {pend.COPY_GROWTH} x it + "
                           f"{pend.COPY_SLACK >> 20} MiB, the most apply accepts): nothing was written")
    if dry_run:
        return report
    if not fork and report.changed_lines == 0:
        # Nothing (new) to change: no pending copy is made, an existing one stays.
        return report
    owner = owner_of(os.stat(orig))
    op.write_files(owner=owner)
    try:
        saved.write_files(owner=owner)
        _write_result(t, orig, report, fork, had_pending, meta, operation, arguments, removed)
    except BaseException:
        # Nothing refers to the files this pass created: take them back.
        saved.remove_files()
        op.remove_files()
        raise
    return report


def _loggable(value):
    """The command's options as the surgeries log can hold them: a path that is
    not UTF-8 (the only text the CLI lets through undecoded) is logged with
    its odd bytes as ``\\xNN``."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return value
    if isinstance(value, dict):
        return {k: _loggable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_loggable(v) for v in value]
    return value


def _write_result(t: Transcript, orig: Path, report: SurgeryReport, fork: bool, had_pending: bool,
                  meta: dict | None, operation: str, arguments: dict | None, removed: set[str]) -> None:
    if fork:
        write_atomic(t.path, t.chunks(), owner=owner_of(os.stat(orig)))
        report.written = True
        return
    entry = {"command": operation, "arguments": arguments or {}, "at": now_timestamp(),
             "records_changed": report.changed_lines, "tokens_before": report.tokens_base,
             "tokens_after": report.tokens_after, "removed": sorted(removed),
             "stale_from": report.stale_from, "fit": list(report.fit) if report.fit else None,
             "copy_size": report.bytes_after}
    if not had_pending:
        pend.check_descends(orig, meta)  # not rewritten while we worked
        pend.write_snapshot(orig, t.chunks(), dict(meta, passes=[entry], copy_size=report.bytes_after))
        report.snapshot_created = True
    else:
        # The pass is recorded before the copy is written: killed in between,
        # the record lists a pass whose removals are still present (apply
        # accepts that); the other order would leave a copy no pass explains.
        pend.record_pass(orig, entry)
        pend._step("pass recorded")
        try:
            pend.write_pending(orig, t.chunks())
        except BaseException:
            try:
                pend.write_meta(orig, meta)  # the copy is unchanged: so is its record
            except OSError:
                pass  # the extra recorded pass is harmless (see above); the first error is the one to say
            raise
    report.written = True
