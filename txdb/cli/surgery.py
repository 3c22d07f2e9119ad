"""The surgery commands: snapshot, apply, strip-*, reset-usage, fork.

Registered on the ``cli`` group when one of them runs. Every mutating
command takes one ``SurgeryOptions`` (the shared options: SESSION or
--where, --from/--to, --dry-run, --fork, ...) and its own options; the
library (``txdb.surgery``) does the work and returns typed reports
(``SurgeryReport``, ``ApplyReport``, the plan's outcomes) that are
formatted here.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

import click

from ..catalog import resolve_session
from ..surgery import ops
from ..surgery import pending as pend
from ..surgery import select as sel
from ..surgery.engine import SurgeryReport, load_base, run_surgery
from ..surgery.log import apply_logged, log_fork
from ..surgery.usage import reset_usage
from .main import cli, db_option, open_catalog
from .output import clip, echo, tabulate, to_json, catalog_warning


@dataclass(frozen=True)
class SurgeryOptions:
    """What the user asked of a mutating command, beside its own options."""

    session: str | None
    db_path: str | None = None
    where: str | None = None
    apply: bool = False          # --apply (with --where): apply each pending copy right away
    frm: int | None = None       # --from / --to: chain positions to touch
    to: int | None = None
    dry_run: bool = False
    fork: bool = False           # --fork, or --fork-title alone
    fork_title: str | None = None
    usage_reset: bool = True     # not --no-usage-reset
    keep_dropped_thinking: bool = False
    backup: bool = True          # not --no-backup (takes effect with --apply; nothing to skip otherwise)
    as_json: bool = False
    arguments: dict = field(default_factory=dict)  # the command's options as logged in `surgeries`

    @property
    def positions(self) -> tuple[int | None, int | None] | None:
        if self.frm is None and self.to is None:
            return None
        return (self.frm, self.to)


# The shared options, in groups a command takes or leaves (see surgery_options).
_WHERE = [
    click.option("--where", "where", default=None, metavar="SQL",
                 help="Instead of SESSION: an SQL condition over the target view, across every "
                      "session in the catalog (see docs/surgery.md)."),
    click.option("--apply", "do_apply", is_flag=True,
                 help="Apply each pending copy right away (every check of `txdb apply`)."),
]
_RANGE = [
    click.option("--from", "frm", type=click.IntRange(min=0), default=None,
                 help="First chain position to touch (as in the catalog's active_chain view)."),
    click.option("--to", "to", type=click.IntRange(min=0), default=None, help="Last chain position to touch."),
    click.option("--pos", "pos", type=click.IntRange(min=0), default=None,
                 help="One chain position: the same as --from N --to N."),
]
# Every mutating command takes it (the surgery spec): it matters only where a pass applies.
_NO_BACKUP = click.option(
    "--no-backup", is_flag=True,
    help="Keep no .bak when this pass applies (--apply). Otherwise there is nothing to skip: a pending "
         "copy or a fork is a new file, the original is the backup.")
_WRITE = [
    click.option("--dry-run", is_flag=True, help="Run everything on a throwaway copy; write nothing."),
    click.option("--fork", "fork", is_flag=True,
                 help="Write the result as a new session next to the original (no apply needed)."),
    click.option("--fork-title", default=None, help="Title of the fork (default: '<title> (Stripped)')."),
    _NO_BACKUP,
]
_EDIT = [
    click.option("--no-usage-reset", is_flag=True, help="Leave recorded usage (the context gauge) as it is."),
    click.option("--keep-dropped-thinking", is_flag=True,
                 help="Keep the later thinking blocks the API will drop after this edit."),
]
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")

# Parameters that are not the command's options as logged in `surgeries.arguments`.
_NOT_ARGUMENTS = {"db_path", "as_json", "session", "where", "do_apply"}
_SHARED = {"session", "db_path", "where", "do_apply", "frm", "to", "pos", "dry_run", "fork", "fork_title",
           "no_usage_reset", "keep_dropped_thinking", "no_backup", "as_json"}


def surgery_options(*, where: bool = True, edits: bool = True, ranged: bool = True):
    """Give a command the shared options, passed to it as one ``SurgeryOptions``
    (first argument) beside its own options.

    ``where``: SESSION may be replaced by --where (and --apply); ``edits``:
    the command edits content, so --from/--to/--pos, --no-usage-reset,
    --keep-dropped-thinking apply to it (every command takes --no-backup);
    ``ranged=False``: a command that names its one target itself (its own
    required --pos or --id) takes no --from/--to/--pos range.
    """
    takes_range = edits and ranged
    own = set() if takes_range else {"frm", "to", "pos"}

    def decorate(f):
        @functools.wraps(f)
        def command(**params):
            shared = {k: params.pop(k) for k in list(params) if k in _SHARED and k not in own}
            if shared.get("pos") is not None:
                if shared.get("frm") is not None or shared.get("to") is not None:
                    raise click.UsageError("--pos N is one position: give it or --from/--to, not both")
                shared["frm"] = shared["to"] = shared["pos"]
            logged = {k: v for k, v in {**shared, **params}.items()
                      if k not in _NOT_ARGUMENTS and v not in (None, False, ())}
            opts = SurgeryOptions(
                session=shared.get("session"), db_path=shared.get("db_path"), where=shared.get("where"),
                apply=shared.get("do_apply", False), frm=shared.get("frm"), to=shared.get("to"),
                dry_run=shared["dry_run"], fork=shared["fork"] or shared["fork_title"] is not None,
                fork_title=shared["fork_title"], usage_reset=not shared.get("no_usage_reset", False),
                keep_dropped_thinking=shared.get("keep_dropped_thinking", False),
                backup=not shared.get("no_backup", False), as_json=shared["as_json"], arguments=logged,
            )
            _check(opts)
            return f(opts, **params)

        decorators = [click.argument("session", required=not where), db_option] + (_WHERE if where else []) + (_RANGE if takes_range else []) + _WRITE \
            + (_EDIT if edits else []) + [_JSON]
        for d in reversed(decorators):
            command = d(command)
        return command

    return decorate


def _check(o: SurgeryOptions) -> None:
    """Combinations of the shared options that mean nothing."""
    if o.session and o.where:
        raise click.UsageError("give a SESSION or --where, not both")
    if not o.session and not o.where:
        raise click.UsageError("Missing argument 'SESSION' (or --where \"<SQL condition>\")")
    if o.where and o.positions is not None:
        raise click.UsageError("--from/--to take a SESSION; with --where, select positions in the "
                               "condition (the view's `pos` column)")
    if o.frm is not None and o.to is not None and o.frm > o.to:
        raise click.ClickException(f"--from {o.frm} is after --to {o.to}: give the range lowest position first")
    if o.apply and o.fork:
        raise click.UsageError("--apply and --fork exclude each other (a fork needs no apply)")


def _resolve(db_path, session: str):
    conn, _ = open_catalog(db_path)
    ref = resolve_session(conn, session, mutating=True)
    return conn, pend.original_path(ref.path)


def _csv(value: str | None) -> list[str] | None:
    if not value:
        return None
    return [s.strip() for s in value.split(",") if s.strip()]


def _run(o: SurgeryOptions, operation: str, op, options: dict | None = None) -> None:
    """SESSION: one surgery (and apply with --apply); --where: the bulk plan."""
    if o.where:
        _run_where(o, operation, options or {})
        return
    conn, orig = _resolve(o.db_path, o.session)
    report = run_surgery(
        orig, operation, op, dry_run=o.dry_run, fork=o.fork, fork_title=o.fork_title,
        usage_reset=o.usage_reset, keep_dropped_thinking=o.keep_dropped_thinking, arguments=o.arguments,
        positions=o.positions,
    )
    if report.written and report.fork_session_id:
        log_fork(conn, report, o.arguments)
    if o.apply and report.written and not report.fork_session_id:
        rep, ids = apply_logged(conn, orig, backup=o.backup)
        if o.as_json:
            echo(to_json({"surgery": report.as_dict(), "apply": rep.as_dict(), "surgery_ids": ids}))
            return
        _print_report(report, applied=True)
        _print_apply(rep, False)
        return
    if o.as_json:
        echo(to_json(report.as_dict()))
        return
    _print_report(report)
    if not o.backup and report.written and not report.fork_session_id:
        echo("--no-backup: no backup was due (the original is untouched); "
             "`txdb apply --no-backup` keeps none when this copy is applied.")


def _run_where(o: SurgeryOptions, command: str, options: dict) -> None:
    """The bulk path: select, plan (one pending copy per session), optionally apply."""
    conn, path = open_catalog(o.db_path)
    selection = sel.select_targets(conn, path, command, o.where)
    outcomes = sel.plan(
        conn, selection, command, options, dry_run=o.dry_run, fork=o.fork, fork_title=o.fork_title,
        usage_reset=o.usage_reset, keep_dropped_thinking=o.keep_dropped_thinking,
        arguments=dict(o.arguments, where=selection.condition), on_fork=lambda r: log_fork(conn, r, o.arguments),
    )
    if o.apply and not o.dry_run:
        # A session this pass left unchanged may hold an earlier pass's copy (a plan
        # run first, then the same command with --apply): apply that too.
        todo = [x.path for x in outcomes if x.status == "pending" or (x.status == "unchanged" and x.pending)]
        applied = sel.apply_all(conn, todo, backup=o.backup)
        by = {a.path: a for a in applied}
        for x in outcomes:
            a = by.get(x.path)
            if a is not None:
                x.status = "applied" if a.applied else "apply-refused"
                x.error = a.error
                x.backup, x.surgery_ids = a.backup, a.surgery_ids
    refused = [x for x in outcomes if x.status in ("refused", "apply-refused")]
    if o.as_json:
        echo(to_json({
            "command": command, "view": selection.view, "where": selection.condition, "rows": selection.rows,
            "sessions": [x.as_dict() for x in outcomes], "refreshed": selection.refreshed,
            "gone": selection.gone, "dry_run": o.dry_run, "applied": sum(x.status == "applied" for x in outcomes),
            "refused": len(refused),
        }))
    else:
        _print_where(conn, command, selection, outcomes, dry_run=o.dry_run, do_apply=o.apply)
    if refused:
        raise click.exceptions.Exit(1)


def _short(sid: str | None) -> str:
    return (sid or "?")[:8]


def _title(t: str | None, n: int = 40) -> str:
    """A title on one line, at most ``n`` display columns (a CJK character takes 2)."""
    return clip(" ".join((t or "").split()), n)


def _session_label(conn, o) -> tuple[str, str | None]:
    """(session column, title) of a plan row: a subagent transcript
    (``<session>/subagents/agent-<id>.jsonl``, whose records carry the parent's
    sessionId) shows as ``agent-<id> of <parent>``, titled by its own title or
    else its parent's."""
    p = Path(o.path)
    if p.parent.name != "subagents":
        return _short(o.session_id), o.title
    title = o.title
    if not title:
        row = conn.execute("SELECT s.title FROM sessions s JOIN files f ON f.id = s.file_id "
                           "WHERE f.kind = 'session' AND s.session_id = ? AND s.title IS NOT NULL LIMIT 1",
                           (o.session_id,)).fetchone()
        title = row[0] if row else None
    return f"{p.stem} of {_short(o.session_id)}", title


def _print_where(conn, command, selection, outcomes, *, dry_run, do_apply):
    for p in selection.refreshed:
        echo(f"Refreshed (changed since indexed; query re-run): {p}")
    for p in selection.gone:
        echo(f"Skipped (file no longer on disk): {p}")
    if not outcomes:
        echo(f"No rows of {selection.view} match: nothing to do.")
        return
    rows = []
    for o in outcomes:
        tok = "" if o.tokens_before is None else f"{o.tokens_before:,} -> {o.tokens_after:,}"
        label, title = _session_label(conn, o)
        freed = "" if o.bytes_before is None else f"{o.bytes_before - o.bytes_after:,}"
        rows.append([label, _title(title), o.targets, o.changed, tok, freed, o.status])
    echo(tabulate(rows, headers=["session", "title", "targets", "changed", "est. tokens", "bytes removed",
                                 "status"]))
    ok = [o for o in outcomes if o.tokens_before is not None and o.status != "refused"]
    saved = sum(o.tokens_before - o.tokens_after for o in ok)
    freed = sum(o.bytes_before - o.bytes_after for o in ok if o.bytes_before is not None)
    tokens = f"~{saved:,} estimated tokens saved" if saved >= 0 else f"~{-saved:,} estimated tokens added"
    size = f"{freed:,} bytes removed" if freed >= 0 else f"{-freed:,} bytes added"
    echo(f"{len(outcomes)} sessions, {selection.rows} matching rows of {selection.view}; "
         f"{sum(o.changed for o in outcomes)} changed; {tokens} ({size}) by this pass.")
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


def _print_report(r: SurgeryReport, applied: bool = False) -> None:
    res = r.result
    parts = []
    tools = res.get("tools", res if "results" in res else None)
    if tools:
        parts.append(f"{tools['results']} tool results and {tools['inputs']} tool inputs cleared"
                     + (f" ({tools['kept_errors']} error results kept)" if tools.get("kept_errors") else ""))
    thinking = res.get("thinking", res if "blocks" in res and "chars" in res else None)
    if thinking:
        parts.append(f"{thinking['blocks']} thinking blocks removed"
                     + (f" ({thinking['records_removed']} emptied records re-parented)"
                        if thinking.get("records_removed") else ""))
    if "removed" in res and "attachments" in res:
        parts.append(f"{res['removed']} of {res['attachments']} attachments dropped")
    if "replaced" in res and "transcripts" in res:
        parts.append(f"{res['replaced']} of {res['images']} images replaced by transcripts"
                     + (f", {res['dropped']} dropped" if res["dropped"] else "")
                     + (f", {res['kept']} kept (no transcript)" if res["kept"] else "")
                     + (f"; {res['invalid']} with invalid base64" if res["invalid"] else "")
                     + f" ({res['transcripts_used']} of {res['transcripts']} <sha256>.txt files used"
                     + (f"; {res['ignored']} other entries of --dir ignored" if res.get("ignored") else "") + ")")
    if "summarized" in res:
        parts.append(f"positions 0..{res['before'] - 1} ({res['summarized']} records, {res['dialogue_messages']} "
                     f"messages of dialogue) summarised behind a compact boundary; {res['kept']} records kept "
                     f"with fresh uuids"
                     + (f"; {res['kept_state']} announcement and system-prompt records before the cut carried "
                        f"over" if res.get("kept_state") else ""))
    if "capped" in res:
        parts.append(f"{res['capped']} turns' usage capped")
    if "persisted" in res:
        moved = ", ".join(f"{n} {k}" for k, n in res["persisted"].items() if n) or "nothing"
        parts.append(f"persisted {moved} ({res['chars_moved']:,} chars to {res['sidecars_new']} new sidecar files"
                     + (f", {res['sidecars_reused']} reused" if res["sidecars_reused"] else "") + ")"
                     + (f"; {res['skipped_persisted']} already persisted" if res["skipped_persisted"] else ""))
    for rg in res.get("ranges", []):
        if rg["status"] == "already":
            parts.append(f"positions {rg['from']}..{rg['to']}: already one plain user message (position "
                         f"{rg['at']}) carrying its <persisted-range> marker; nothing to change")
        elif rg["status"] == "resummarised":
            parts.append(f"positions {rg['from']}..{rg['to']}: already compacted; its marker's summary is now "
                         f"{rg['summary']!r}")
        elif rg["status"] == "converted":
            parts.append(f"position {rg['at']}: the {rg['was']} record carrying a <persisted-range> marker "
                         f"is now a plain user message (marker kept)")
        else:
            saved = len(rg["files"])
            verb = "would be saved" if r.dry_run else "saved"
            parts.append(f"positions {rg['from']}..{rg['to']} ({rg['count']} records) collapsed into one user "
                         f"message at position {rg['at']}; originals {verb} to {rg['folder']} ({saved} "
                         f"{'file' if saved == 1 else 'files'})"
                         + (f"; {rg['kept_in_place']} announcement and system-prompt records left in place"
                            if rg.get("kept_in_place") else ""))
    for st in res.get("steps", []):  # rescue: its plan, step by step
        parts.append(f"{st['step']}: " + ", ".join(
            x for x in (f"{st['moved']} moved to sidecars" if st.get("moved") else "",
                        f"{st['dropped']} dropped" if st.get("dropped") else "") if x)
            + f" -> ~{st['tokens_after']:,} tokens")
    if "target" in res and "steps" in res:
        parts.append(f"target {res['target']:,}" + (" (default)" if res.get("target_default") else "")
                     + ("" if res["steps"] else f": already under (~{res['tokens_start']:,})"))
    if "markers_repointed" in res:
        parts.append(f"{res['images']} image transcripts persisted, {res['tool_results_moved']} .tool-results "
                     f"files moved, {res['markers_repointed']} markers re-pointed")
    echo(f"{r.operation}: " + ("; ".join(parts) if parts else "done"))
    if r.base != "original" and ("persisted" in res or "markers_repointed" in res or "ranges" in res):
        echo(f"Positions are those of the {r.base}'s active chain.")
    for f in res.get("files", [])[:20] if isinstance(res.get("files"), list) else []:
        if isinstance(f, dict):
            where = f"toolu {f['tool_use_id']}" if f.get("tool_use_id") else f"pos {f['pos']}"
            echo(f"  {f['kind']:<8} {where}: {f['chars']:,} chars -> {f['path']}")
    if isinstance(res.get("files"), list) and len(res["files"]) > 20:
        echo(f"  ... and {len(res['files']) - 20} more (--json lists them all)")
    for u in res.get("summaries_unused", []):
        echo(f"Summary key {u['key']!r} not used: {u['reason']}.", err=True)
    d = r.dropped_thinking
    if d.get("count"):
        verb = "kept (--keep-dropped-thinking)" if not r.dropped_thinking_removed else "removed"
        echo(f"Preserved thinking: the edit at chain position {d['edit_pos']} makes the API drop "
                   f"{d['count']} later thinking blocks ({d['chars']:,} chars, first at position {d['first_pos']}); "
                   f"{verb}.")
    if r.usage and r.usage.get("capped"):
        u = r.usage
        echo(f"Usage reset: {u['capped']} turns capped; context gauge {u['last_before']:,} -> "
                   f"{u['last_after']:,} tokens (never raised)")
    # This pass, from the copy it started on (the original's figure too when that was a pending copy).
    since = f" ({r.tokens_before:,} in the original)" if r.base == "pending copy" else ""
    echo(f"Estimated context: {r.tokens_base:,} -> {r.tokens_after:,} tokens{since}; "
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


@cli.command("strip-tools")
@surgery_options()
@click.option("--tools", default=None, help="Only these tools, comma-separated (globs allowed: mcp__*).")
@click.option("--only-inputs", is_flag=True, help="Only clear tool_use inputs.")
@click.option("--only-results", is_flag=True, help="Only clear tool_result content.")
@click.option("--keep-last-lines", type=click.IntRange(min=0), default=None,
              help="Keep the last N lines of each result.")
def strip_tools_cmd(o: SurgeryOptions, tools, only_inputs, only_results, keep_last_lines):
    """Clear tool inputs and results (error results keep their text).

    Writes <session>.jsonl.pending; the original is untouched until `txdb apply`.
    With --where, the rows of block_targets it selects, in every session: a
    tool_use row clears that input, a tool_result row that result.

    Example:

    \b
        txdb strip-tools SESSION --tools Bash,Read --only-results --keep-last-lines 3
        txdb strip-tools --where "tool_name = 'Read' and result_tokens > 10000" --only-results
    """
    if only_inputs and only_results:
        raise click.UsageError("--only-inputs and --only-results exclude each other")
    names = _csv(tools)

    def op(t, _orig):
        return ops.strip_tools(t, tools=names, only_inputs=only_inputs, only_results=only_results,
                               keep_last_lines=keep_last_lines, positions=o.positions)
    _run(o, "strip-tools", op, dict(tools=names, only_inputs=only_inputs, only_results=only_results,
                                    keep_last_lines=keep_last_lines))


@cli.command("strip-thinking")
@surgery_options()
def strip_thinking_cmd(o: SurgeryOptions):
    """Remove thinking blocks (text and signature; <thinking>/<think> text blocks too).

    With --where, the thinking rows of block_targets it selects, in every session.

    Example:

    \b
        txdb strip-thinking SESSION --from 0 --to 120
        txdb strip-thinking --where "kind = 'thinking' and signature_chars > 5000"
    """
    _run(o, "strip-thinking", lambda t, _o: ops.strip_thinking(t, positions=o.positions))


@cli.command("strip-all")
@surgery_options()
@click.option("--tools", default=None, help="Only these tools, comma-separated.")
@click.option("--keep-last-lines", type=click.IntRange(min=0), default=None,
              help="Keep the last N lines of each result.")
def strip_all_cmd(o: SurgeryOptions, tools, keep_last_lines):
    """Strip all tool content and thinking (the usual first move).

    Example:

    \b
        txdb strip-all SESSION && txdb apply SESSION
        txdb strip-all --where "project like '%myapp%' and on_chain = 1 and pos < 200"
    """
    names = _csv(tools)
    _run(o, "strip-all",
         lambda t, _o: ops.strip_all(t, tools=names, keep_last_lines=keep_last_lines, positions=o.positions),
         dict(tools=names, keep_last_lines=keep_last_lines))


@cli.command("strip-attachments")
@surgery_options()
@click.option("--types", default=None, help="Only these attachment types, comma-separated.")
@click.option("--keep-recent", type=click.IntRange(min=0), default=None,
              help="Keep the newest N of each superseded type [default: 1; with --where: 0, "
                   "the condition chose the rows].")
@click.option("--drop-all", is_flag=True, help="Drop every attachment of --types, ignoring keep-all.")
@click.option("--include-free", is_flag=True,
              help="Also drop types that render to nothing (shrinks the file only; implied by --where).")
@click.option("--list", "list_only", is_flag=True, help="Show what is there and what the policy would do; change nothing.")
def strip_attachments_cmd(o: SurgeryOptions, types, keep_recent, drop_all, include_free, list_only):
    """Drop superseded attachments (keeps the newest of each kind, and every
    queued_command, *_delta, skill_listing, hook context, prompt_snapshot and
    unknown type); children are re-parented.

    With --where, exactly the rows of attachment_targets it selects, in every
    session, except what the safety rules keep (keep-all, system-prompt and
    unknown types unless --drop-all --types names them; the leaf).

    Example:

    \b
        txdb strip-attachments SESSION --list
        txdb strip-attachments SESSION --types task_reminder,hook_success --keep-recent 3
        txdb strip-attachments --where "type = 'task_reminder' and timestamp < datetime('now', '-7 days')"
    """
    type_list = _csv(types)
    if drop_all and not type_list:
        raise click.UsageError("--drop-all needs --types (it can remove what tells the model its tools exist)")
    if list_only and o.where:
        raise click.UsageError("--list takes a SESSION; with --where, --dry-run shows the plan")
    kw = dict(types=type_list, keep_recent=1 if keep_recent is None else keep_recent, drop_all=drop_all,
              include_free=include_free, positions=o.positions)
    if list_only:
        _list_attachments(o, kw)
        return
    _run(o, "strip-attachments", lambda t, _o: ops.strip_attachments(t, **kw),
         dict(types=type_list, keep_recent=keep_recent, drop_all=drop_all, include_free=None))


def _list_attachments(o: SurgeryOptions, kw: dict) -> None:
    _conn, orig = _resolve(o.db_path, o.session)
    t, _original, _had, _meta = load_base(orig)
    rows = ops.attachment_listing(ops.attachment_plan(t, **kw))
    if o.as_json:
        echo(to_json(rows))
        return
    echo(tabulate([list(r.values()) for r in rows], headers=list(rows[0].keys()) if rows else []))
    echo(f"Policy drops {sum(r['drop'] for r in rows)} attachments, "
         f"~{sum(r['drop_tokens'] for r in rows):,} rendered tokens.")


@cli.command("reset-usage")
@surgery_options(where=False, edits=False)
def reset_usage_cmd(o: SurgeryOptions):
    """Lower stale usage counts so the context gauge matches a stripped session.

    Caps, never raises: a recorded count only ever goes down. It caps every
    stale turn of the active chain (no --from/--to) and changes no content
    (so no thinking is dropped); `txdb apply` then swaps it in.

    Example:

    \b
        txdb reset-usage SESSION && txdb apply SESSION
    """
    def op(t, original):
        # Standalone (no earlier pass in a pending copy): no "before" to compare with.
        standalone = getattr(t, "fork_of", None) is not None or t.digest() == original.digest()
        return reset_usage(t, None if standalone else original)
    # The op is the reset: the engine's own reset after an edit is not run again.
    _run(dataclasses.replace(o, usage_reset=False, keep_dropped_thinking=True), "reset-usage", op)


@cli.command("fork")
@click.argument("session")
@db_option
@click.option("--fork-title", default=None, help="Title of the fork (default: '<title> (Stripped)').")
@click.option("--dry-run", is_flag=True, help="Report only; write nothing.")
@_NO_BACKUP
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def fork_cmd(session, db_path, fork_title, dry_run, no_backup, as_json):
    """Copy a session to a new session id, stamped like Claude Code's /branch.

    Example:

    \b
        txdb fork SESSION --fork-title "checkpoint"
    """
    o = SurgeryOptions(session, db_path, dry_run=dry_run, fork=True, fork_title=fork_title, usage_reset=False,
                       keep_dropped_thinking=True, as_json=as_json)
    _run(o, "fork", lambda t, _o: {})


@cli.command("snapshot")
@click.argument("session")
@db_option
@click.option("--refresh", is_flag=True, help="Discard the pending copy and snapshot again.")
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot record as JSON.")
def snapshot_cmd(session, db_path, refresh, as_json):
    """Copy a session to <session>.jsonl.pending (mutating commands do this themselves).

    Example:

        txdb snapshot SESSION --refresh
    """
    _conn, orig = _resolve(db_path, session)
    snap = pend.snapshot(orig, refresh=refresh)
    if as_json:
        echo(to_json(snap.as_dict()))
        return
    verb = "Snapshot taken" if snap.created else "Pending copy reused (--refresh to retake)"
    echo(f"{verb}: {snap.pending} ({snap.size:,} bytes of the original)")
    if snap.left_out_bytes:
        echo(f"Left out an unfinished last line ({snap.left_out_bytes:,} bytes).")


@cli.command("apply")
@click.argument("session", required=False)
@db_option
@click.option("--all-pending", is_flag=True,
              help="Apply every pending copy beside a catalogued session (one refusal does not stop the others).")
@click.option("--dry-run", is_flag=True, help="Run every check; swap nothing.")
@click.option("--no-backup", is_flag=True, help="Do not keep the original as .bak.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def apply_cmd(session, db_path, all_pending, dry_run, no_backup, as_json):
    """Swap the pending copy in for the original: the one write to a session file.

    Refuses (changing no file) when the original is being written, was
    rewritten since the snapshot, or when the copy fails verify where the
    original did not. SESSION may be the original or the .pending path.
    Each applied surgery is logged in the `surgeries` table and the catalog
    is refreshed for that file.

    Example:

    \b
        txdb apply ~/.claude/projects/-home-me-app/3f2a9c1e-....jsonl
        txdb apply --all-pending
    """
    if all_pending:
        if session:
            raise click.UsageError("give a SESSION or --all-pending, not both")
        _apply_all(db_path, dry_run=dry_run, no_backup=no_backup, as_json=as_json)
        return
    if not session:
        raise click.UsageError("Missing argument 'SESSION' (or --all-pending)")
    conn, orig = _resolve(db_path, session)
    rep, ids = apply_logged(conn, orig, dry_run=dry_run, backup=not no_backup)
    if as_json:
        d = rep.as_dict()
        d["surgery_ids"] = ids
        echo(to_json(d))
        return
    _print_apply(rep, dry_run)


def _print_apply(rep, dry_run: bool) -> None:
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


def _apply_all(db_path, *, dry_run, no_backup, as_json):
    conn, _ = open_catalog(db_path)
    paths = sel.all_pending(conn)
    outs = sel.apply_all(conn, paths, dry_run=dry_run, backup=not no_backup)
    refused = [o for o in outs if o.error]
    if as_json:
        echo(to_json([o.as_dict() for o in outs]))
    else:
        if not outs:
            echo("No pending copies.")
        for o in outs:
            if o.error:
                continue
            verb = "Checked (dry run)" if dry_run else "Applied"
            echo(f"{verb}: {o.path} ({o.size_before:,} -> {o.size_after:,} bytes)"
                       + (f"; backup {o.backup}" if o.backup else ""))
            if o.catalog_error:
                echo(catalog_warning(f"applied {o.path}", o.catalog_error), err=True)
        for o in refused:
            echo(f"Refused: {o.path}: {o.error}", err=True)
        if outs:
            echo(f"{len(outs) - len(refused)} of {len(outs)} pending copies "
                       f"{'passed every check' if dry_run else 'applied'}; {len(refused)} refused.")
    if refused:
        raise click.exceptions.Exit(1)
