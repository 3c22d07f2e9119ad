"""The surgery commands: snapshot, apply, strip-*, reset-usage, fork.

Registered on the ``cli`` group of ``txdb.cli``. Each command resolves its
SESSION (id or path) through the catalog, calls the library in
``txdb.surgery`` and prints a short report (``--json`` for the data).
"""

from __future__ import annotations

import click

from .catalog import resolve_session
from .cli import _json, _open, cli, db_option
from .ingest.store import refresh_path
from .surgery import ops
from .surgery import pending as pend
from .surgery.engine import SurgeryReport, load_base, run_surgery
from .surgery.usage import reset_usage


def _resolve(db_path, session: str):
    conn, _ = _open(db_path)
    ref = resolve_session(conn, session)
    return conn, pend.original_path(ref.path)


def _csv(value: str | None) -> list[str] | None:
    if not value:
        return None
    return [s.strip() for s in value.split(",") if s.strip()]


def _range(frm, to):
    if frm is None and to is None:
        return None
    if frm is not None and to is not None and frm > to:
        raise click.UsageError(f"--from {frm} is after --to {to}")
    return (frm, to)


def mutating(f):
    """Options every mutating command shares."""
    opts = [
        click.argument("session"),
        db_option,
        click.option("--from", "frm", type=click.IntRange(min=0), default=None,
                     help="First chain position to touch (as in the catalog's active_chain view)."),
        click.option("--to", "to", type=click.IntRange(min=0), default=None, help="Last chain position to touch."),
        click.option("--dry-run", is_flag=True, help="Run everything on a throwaway copy; write nothing."),
        click.option("--fork", "fork", is_flag=True,
                     help="Write the result as a new session next to the original (no apply needed)."),
        click.option("--fork-title", default=None, help="Title of the fork (default: '<title> (Stripped)')."),
        click.option("--no-usage-reset", is_flag=True, help="Leave recorded usage (the context gauge) as it is."),
        click.option("--keep-dropped-thinking", is_flag=True,
                     help="Keep the later thinking blocks the API will drop after this edit."),
        click.option("--no-backup", is_flag=True,
                     help="Accepted for symmetry: mutating commands write only the pending copy; "
                          "backups are made by apply."),
        click.option("--json", "as_json", is_flag=True, help="Print the report as JSON."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _run(db_path, session, operation, op, *, dry_run, fork, fork_title, no_usage_reset,
         keep_dropped_thinking, as_json, usage_reset=True):
    conn, orig = _resolve(db_path, session)
    report = run_surgery(
        orig, operation, op, dry_run=dry_run, fork=fork or fork_title is not None, fork_title=fork_title,
        usage_reset=usage_reset and not no_usage_reset, keep_dropped_thinking=keep_dropped_thinking,
    )
    if report.written and report.fork_session_id:
        refresh_path(conn, report.target)
    _print_report(report, as_json)


def _print_report(r: SurgeryReport, as_json: bool) -> None:
    if as_json:
        click.echo(_json(r.as_dict()))
        return
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
    if "capped" in res:
        parts.append(f"{res['capped']} turns' usage capped")
    click.echo(f"{r.operation}: " + ("; ".join(parts) if parts else "done"))
    d = r.dropped_thinking
    if d.get("count"):
        verb = "kept (--keep-dropped-thinking)" if not r.dropped_thinking_removed else "removed"
        click.echo(f"Preserved thinking: the edit at chain position {d['edit_pos']} makes the API drop "
                   f"{d['count']} later thinking blocks ({d['chars']:,} chars, first at position {d['first_pos']}); "
                   f"{verb}.")
    if r.usage and r.usage.get("capped"):
        u = r.usage
        click.echo(f"Usage reset: {u['capped']} turns capped; context gauge {u['last_before']:,} -> "
                   f"{u['last_after']:,} tokens (never raised)")
    click.echo(f"Estimated context: {r.tokens_before:,} -> {r.tokens_after:,} tokens; "
               f"file {r.bytes_before:,} -> {r.bytes_after:,} bytes; {r.changed_lines} lines rewritten")
    if r.dry_run:
        click.echo("Dry run: nothing written.")
    elif r.fork_session_id:
        click.echo(f"Fork written: {r.target}\nTitle: {r.fork_title}\nResume it with: claude -r {r.fork_session_id}")
    elif r.written:
        click.echo(f"Pending copy: {r.target}\nThe original is untouched. Next: txdb verify {r.target} && "
                   f"txdb apply {r.original}")
    else:
        click.echo("Nothing to change: no pending copy written.")


@cli.command("strip-tools")
@mutating
@click.option("--tools", default=None, help="Only these tools, comma-separated (globs allowed: mcp__*).")
@click.option("--only-inputs", is_flag=True, help="Only clear tool_use inputs.")
@click.option("--only-results", is_flag=True, help="Only clear tool_result content.")
@click.option("--keep-last-lines", type=click.IntRange(min=0), default=None,
              help="Keep the last N lines of each result.")
def strip_tools_cmd(session, db_path, frm, to, dry_run, fork, fork_title, no_usage_reset,
                    keep_dropped_thinking, no_backup, as_json, tools, only_inputs, only_results, keep_last_lines):
    """Clear tool inputs and results (error results keep their text).

    Writes <session>.jsonl.pending; the original is untouched until `txdb apply`.

    Example:

        txdb strip-tools SESSION --tools Bash,Read --only-results --keep-last-lines 3
    """
    if only_inputs and only_results:
        raise click.UsageError("--only-inputs and --only-results exclude each other")
    rng = _range(frm, to)
    names = _csv(tools)

    def op(t, _orig):
        return ops.strip_tools(t, tools=names, only_inputs=only_inputs, only_results=only_results,
                               keep_last_lines=keep_last_lines, positions=rng)
    _run(db_path, session, "strip-tools", op, dry_run=dry_run, fork=fork, fork_title=fork_title,
         no_usage_reset=no_usage_reset, keep_dropped_thinking=keep_dropped_thinking, as_json=as_json)


@cli.command("strip-thinking")
@mutating
def strip_thinking_cmd(session, db_path, frm, to, dry_run, fork, fork_title, no_usage_reset,
                       keep_dropped_thinking, no_backup, as_json):
    """Remove thinking blocks (text and signature; <thinking>/<think> text blocks too).

    Example:

        txdb strip-thinking SESSION --from 0 --to 120
    """
    rng = _range(frm, to)
    _run(db_path, session, "strip-thinking", lambda t, _o: ops.strip_thinking(t, positions=rng),
         dry_run=dry_run, fork=fork, fork_title=fork_title, no_usage_reset=no_usage_reset,
         keep_dropped_thinking=keep_dropped_thinking, as_json=as_json)


@cli.command("strip-all")
@mutating
@click.option("--tools", default=None, help="Only these tools, comma-separated.")
@click.option("--keep-last-lines", type=click.IntRange(min=0), default=None,
              help="Keep the last N lines of each result.")
def strip_all_cmd(session, db_path, frm, to, dry_run, fork, fork_title, no_usage_reset,
                  keep_dropped_thinking, no_backup, as_json, tools, keep_last_lines):
    """Strip all tool content and thinking (the usual first move).

    Example:

        txdb strip-all SESSION && txdb apply SESSION
    """
    rng = _range(frm, to)
    names = _csv(tools)
    _run(db_path, session, "strip-all",
         lambda t, _o: ops.strip_all(t, tools=names, keep_last_lines=keep_last_lines, positions=rng),
         dry_run=dry_run, fork=fork, fork_title=fork_title, no_usage_reset=no_usage_reset,
         keep_dropped_thinking=keep_dropped_thinking, as_json=as_json)


@cli.command("strip-attachments")
@mutating
@click.option("--types", default=None, help="Only these attachment types, comma-separated.")
@click.option("--keep-recent", type=click.IntRange(min=0), default=1, show_default=True,
              help="Keep the newest N of each superseded type.")
@click.option("--drop-all", is_flag=True, help="Drop every attachment of --types, ignoring keep-all.")
@click.option("--include-free", is_flag=True, help="Also drop types that render to nothing (shrinks the file only).")
@click.option("--list", "list_only", is_flag=True, help="Show what is there and what the policy would do; change nothing.")
def strip_attachments_cmd(session, db_path, frm, to, dry_run, fork, fork_title, no_usage_reset,
                          keep_dropped_thinking, no_backup, as_json, types, keep_recent, drop_all,
                          include_free, list_only):
    """Drop superseded attachments (keeps the newest of each kind, and every
    queued_command, *_delta, skill_listing, hook context, prompt_snapshot and
    unknown type); children are re-parented.

    Example:

        txdb strip-attachments SESSION --list
        txdb strip-attachments SESSION --types task_reminder,hook_success --keep-recent 3
    """
    type_list = _csv(types)
    if drop_all and not type_list:
        raise click.UsageError("--drop-all needs --types (it can remove what tells the model its tools exist)")
    rng = _range(frm, to)
    kw = dict(types=type_list, keep_recent=keep_recent, drop_all=drop_all, include_free=include_free, positions=rng)
    if list_only:
        _conn, orig = _resolve(db_path, session)
        t, _original, _had, _meta = load_base(orig)
        rows = ops.attachment_listing(ops.attachment_plan(t, **kw))
        if as_json:
            click.echo(_json(rows))
            return
        from tabulate import tabulate
        click.echo(tabulate([list(r.values()) for r in rows], headers=list(rows[0].keys()) if rows else []))
        click.echo(f"Policy drops {sum(r['drop'] for r in rows)} attachments, "
                   f"~{sum(r['drop_tokens'] for r in rows):,} rendered tokens.")
        return
    _run(db_path, session, "strip-attachments", lambda t, _o: ops.strip_attachments(t, **kw),
         dry_run=dry_run, fork=fork, fork_title=fork_title, no_usage_reset=no_usage_reset,
         keep_dropped_thinking=keep_dropped_thinking, as_json=as_json)


@cli.command("reset-usage")
@mutating
def reset_usage_cmd(session, db_path, frm, to, dry_run, fork, fork_title, no_usage_reset,
                    keep_dropped_thinking, no_backup, as_json):
    """Lower stale usage counts so the context gauge matches a stripped session.

    Caps, never raises: a recorded count only ever goes down.

    Example:

        txdb reset-usage SESSION && txdb apply SESSION
    """
    def op(t, original):
        # Standalone (no earlier pass in a pending copy): no "before" to compare with.
        standalone = getattr(t, "fork_of", None) is not None or t.to_bytes() == original.to_bytes()
        return reset_usage(t, None if standalone else original)
    _run(db_path, session, "reset-usage", op, dry_run=dry_run, fork=fork, fork_title=fork_title,
         no_usage_reset=True, keep_dropped_thinking=keep_dropped_thinking, as_json=as_json)


@cli.command("fork")
@click.argument("session")
@db_option
@click.option("--fork-title", default=None, help="Title of the fork (default: '<title> (Stripped)').")
@click.option("--dry-run", is_flag=True, help="Report only; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def fork_cmd(session, db_path, fork_title, dry_run, as_json):
    """Copy a session to a new session id, stamped like Claude Code's /branch.

    Example:

        txdb fork SESSION --fork-title "checkpoint"
    """
    _run(db_path, session, "fork", lambda t, _o: {}, dry_run=dry_run, fork=True, fork_title=fork_title,
         no_usage_reset=True, keep_dropped_thinking=True, as_json=as_json)


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
        click.echo(_json(snap.as_dict()))
        return
    verb = "Snapshot taken" if snap.created else "Pending copy reused (--refresh to retake)"
    click.echo(f"{verb}: {snap.pending} ({snap.size:,} bytes of the original)")
    if snap.left_out_bytes:
        click.echo(f"Left out an unfinished last line ({snap.left_out_bytes:,} bytes).")


@cli.command("apply")
@click.argument("session")
@db_option
@click.option("--dry-run", is_flag=True, help="Run every check; swap nothing.")
@click.option("--no-backup", is_flag=True, help="Do not keep the original as .bak.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def apply_cmd(session, db_path, dry_run, no_backup, as_json):
    """Swap the pending copy in for the original: the one write to a session file.

    Refuses (changing no file) when the original is being written, was
    rewritten since the snapshot, or when the copy fails verify where the
    original did not. SESSION may be the original or the .pending path.

    Example:

        txdb apply ~/.claude/projects/-home-me-app/3f2a9c1e-....jsonl
    """
    conn, orig = _resolve(db_path, session)
    rep = pend.apply(orig, dry_run=dry_run, backup=not no_backup)
    if rep.applied:
        refresh_path(conn, orig)
    if as_json:
        click.echo(_json(rep.as_dict()))
        return
    if dry_run:
        click.echo(f"Dry run: every check passed; {rep.original} would go from {rep.size_before:,} to "
                   f"{rep.size_after:,} bytes.")
    else:
        click.echo(f"Applied: {rep.original} ({rep.size_before:,} -> {rep.size_after:,} bytes)")
        click.echo(f"Backup: {rep.backup}" if rep.backup else "No backup (--no-backup).")
    if rep.discarded_lines:
        click.echo(f"Discarded {rep.discarded_lines} line(s) appended after the snapshot "
                   f"({rep.discarded_bytes:,} bytes).")
