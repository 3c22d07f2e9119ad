"""How a surgery report, a --where plan and an apply are printed."""

from __future__ import annotations

from pathlib import Path

from txdb.model.chain_health import plural
from txdb.model.paths import is_subagent, parent_session_id
from txdb.surgery.commands import result_kind
from txdb.surgery.engine import SurgeryReport
from txdb.surgery.results import Result
from txdb.cli.output import catalog_warning, clip, echo, tabulate

def _short(sid: str | None) -> str:
    return (sid or "?")[:8]


def _title(t: str | None, n: int = 40) -> str:
    """A title on one line, at most ``n`` display columns (a CJK character takes 2)."""
    return clip(" ".join((t or "").split()), n)


def _session_label(conn, o) -> tuple[str, str | None]:
    """(session column, title) of a plan row: a subagent transcript
    (``<session>/subagents/agent-<id>.jsonl``) shows as ``agent-<id> of
    <parent>`` (the parent named by the layout, ``paths.parent_session_id``;
    a long agent id clipped), titled by its own title or else its parent's."""
    if not is_subagent(o.path):
        return _short(o.session_id), o.title
    parent = parent_session_id(o.path)
    title = o.title
    if not title:
        row = conn.execute("SELECT s.title FROM sessions s JOIN files f ON f.id = s.file_id "
                           "WHERE f.kind = 'session' AND s.session_id = ? AND s.title IS NOT NULL LIMIT 1",
                           (parent,)).fetchone()
        title = row[0] if row else None
    return f"{clip(Path(o.path).stem, 16)} of {_short(parent)}", title


def print_where(conn, command, selection, outcomes, *, dry_run, do_apply):
    for p in selection.refreshed:
        echo(f"Refreshed (changed since indexed; query re-run): {p}")
    for p in selection.gone:
        echo(f"Skipped (file no longer on disk): {p}")
    if selection.subagents:
        n = len(selection.subagents)
        echo(f"Skipped {plural(n, 'subagent transcript')}: {command} takes main sessions only "
             f"(what `claude -r` resumes; a subagent's transcript is not resumed).")
    if not outcomes:
        echo(f"No rows of {selection.view} match: nothing to do.")
        return
    kind = result_kind(command)
    rows = []
    for o in outcomes:
        tok = "" if o.tokens_before is None else f"{o.tokens_before:,} -> {o.tokens_after:,}"
        label, title = _session_label(conn, o)
        freed = "" if o.bytes_before is None else f"{o.bytes_before - o.bytes_after:,}"
        res = o.result
        status = (res.idle() if res and not o.changed and o.status in ("dry-run", "unchanged") else None) or o.status
        rows.append([label, _title(title), res.targets(o.targets) if res else kind.no_targets(o.targets), o.changed,
                     tok, freed, status])
    echo(tabulate(rows, headers=["session", "title", kind.targets_header, "changed", "est. tokens",
                                 "bytes removed", "status"]))
    ok = [o for o in outcomes if o.tokens_before is not None and o.status != "refused"]
    saved = sum(o.tokens_before - o.tokens_after for o in ok)
    freed = sum(o.bytes_before - o.bytes_after for o in ok if o.bytes_before is not None)
    tokens = f"~{saved:,} estimated tokens saved" if saved >= 0 else f"~{-saved:,} estimated tokens added"
    size = f"{freed:,} bytes removed" if freed >= 0 else f"{-freed:,} bytes added"
    lowered = sum(o.usage_lowered for o in outcomes)
    usage = f", {lowered:,} usage figures lowered" if lowered else ""
    echo(f"{len(outcomes)} sessions, {selection.rows} matching rows of {selection.view}; "
         f"{sum(o.changed for o in outcomes)} changed{usage}; {tokens} ({size}) by this pass.")
    for o in outcomes:
        if o.error:
            echo(f"Refused: {o.path}: {o.error}", err=True)
    if dry_run:
        echo("Dry run: nothing written.")
    elif any(o.status == "fork" for o in outcomes):
        echo("Forks written next to each original (no apply needed).")
    elif do_apply:
        n = sum(o.status == "applied" for o in outcomes)
        echo(f"Applied {n} of {sum(o.status in ('applied', 'apply-refused') for o in outcomes)}; "
                   "backups kept as .bak; logged in the surgeries table.")
    elif any(o.status == "pending" for o in outcomes):
        echo("Pending copies written; the originals are untouched. Next: txdb apply --all-pending "
                   "(or run again with --apply).")


def print_report(r: SurgeryReport, applied: bool = False, verbose: bool = False) -> None:
    if r.leftover_removed:
        echo(f"The pending copy beside {r.original} had been applied already (an apply killed before it "
             "removed the copy; the swap journal records it): removed, this pass starts from the session.")
    # A declared command's result says how it reads; a library op's dict reads as a plain result.
    res = r.result if isinstance(r.result, Result) else Result(r.result)
    parts = res.describe(r.dry_run)
    if res.one_per_line and parts:
        echo(f"{r.operation}: {parts[0]}")
        for p in parts[1:]:
            echo(f"  {p}")
    else:
        echo(f"{r.operation}: " + ("; ".join(parts) if parts else "done"))
    if r.base != "original" and res.positional:
        echo(f"Positions are those of the {r.base}'s active chain.")
    for line in res.notes(verbose):
        echo(line)
    for line in res.warnings():
        echo(line, err=True)
    d = r.dropped_thinking
    if d.get("count"):
        verb = "kept (--keep-dropped-thinking)" if not r.dropped_thinking_removed else "removed"
        echo(f"Preserved thinking: the edit at chain position {d['edit_pos']} makes the API drop "
                   f"{d['count']} later thinking blocks ({d['chars']:,} chars, first at position {d['first_pos']}); "
                   f"{verb}.")
    if r.usage and r.usage.get("capped"):
        u = r.usage
        echo(f"Usage reset: {plural(u['capped'], 'turn')} capped; context gauge {u['last_before']:,} -> "
                   f"{u['last_after']:,} tokens (never raised)")
    # This pass, from the copy it started on (the original's figure too when that was a pending copy).
    since = f" ({r.tokens_before:,} in the original)" if r.base == "pending copy" else ""
    saved = f", ~{r.tokens_base - r.tokens_after:,} saved" if r.tokens_after < r.tokens_base else ""
    echo(f"Estimated context: {r.tokens_base:,} -> {r.tokens_after:,} tokens{saved}{since}; "
         f"file {r.bytes_before:,} -> {r.bytes_after:,} bytes; {r.changed_lines} lines rewritten")
    if r.changed_lines and r.tokens_after > r.tokens_base:
        echo(f"Note: this pass makes the context larger by ~{r.tokens_after - r.tokens_base:,} tokens "
             f"(what it wrote is bigger than what it replaced).", err=True)
    if r.dry_run:
        echo("Dry run: nothing written.")
    elif r.fork_session_id:
        echo(f"Fork written: {r.target}\nTitle: {r.fork_title}\nResume it with: claude -r {r.fork_session_id}")
    elif r.written and not applied:
        echo(f"Pending copy: {r.target}\nThe original is untouched. Next: txdb verify {r.target} && "
                   f"txdb apply {r.original}")
    elif r.written:
        pass
    elif r.base == "pending copy":
        echo("Nothing new to change: the pending copy stays as earlier passes left it.")
    else:
        echo("Nothing to change: no pending copy written.")


def print_apply(rep, dry_run: bool) -> None:
    for w in getattr(rep, "warnings", None) or ():
        echo(f"Warning: {w}", err=True)
    if dry_run:
        echo(f"Dry run: every check passed; {rep.original} would go from {rep.size_before:,} to "
                   f"{rep.size_after:,} bytes.")
    else:
        echo(f"Applied: {rep.original} ({rep.size_before:,} -> {rep.size_after:,} bytes)")
        echo(f"Backup: {rep.backup}" if rep.backup else "No backup (--no-backup).")
        if rep.catalog_error:
            echo(catalog_warning("applied", rep.catalog_error), err=True)
    if rep.discarded_lines:
        echo(f"Discarded {rep.discarded_lines} line(s) appended after the snapshot "
                   f"({rep.discarded_bytes:,} bytes).")
