"""The strip commands: strip-tools, strip-thinking, strip-all, strip-attachments,
reset-usage. Each checks its options and runs its declaration's op
(``surgery/commands.py``) through ``surgery._run``."""

from __future__ import annotations

import dataclasses

import click

from txdb.surgery import ops
from txdb.surgery.command_ops import attachment_options
from txdb.surgery.engine import load_base
from txdb.cli.main import command
from txdb.cli.output import echo, tabulate, to_json
from txdb.cli.surgery import SurgeryOptions, _csv, _resolve, _run, surgery_options

@command("strip-tools")
@surgery_options()
@click.option("--tools", default=None, help="Only these tools, comma-separated (globs allowed: mcp__*).")
@click.option("--only-inputs", is_flag=True, help="Only clear tool_use inputs.")
@click.option("--only-results", is_flag=True, help="Only clear tool_result content.")
@click.option("--keep-last-lines", type=click.IntRange(min=0), default=None,
              help="Keep the last N lines of each result.")
def strip_tools_cmd(o: SurgeryOptions, tools, only_inputs, only_results, keep_last_lines):
    """Writes <session>.jsonl.pending; the original is untouched until `txdb apply`.
    With --where, the rows of block_targets it selects, in every session: a
    tool_use row clears that input, a tool_result row that result.

    Example:

    \b
        txdb strip-tools SESSION --tools Bash,Read --only-results --keep-last-lines 3
        txdb strip-tools --where "tool_name = 'Read' and result_tokens > 10000" --only-results
    """
    if only_inputs and only_results:
        raise click.UsageError("--only-inputs and --only-results exclude each other")
    _run(o, "strip-tools", dict(tools=_csv(tools), only_inputs=only_inputs, only_results=only_results,
                                keep_last_lines=keep_last_lines))


@command("strip-thinking")
@surgery_options()
def strip_thinking_cmd(o: SurgeryOptions):
    """With --where, the thinking rows of block_targets it selects, in every session.

    Example:

    \b
        txdb strip-thinking SESSION --from 0 --to 120
        txdb strip-thinking --where "kind = 'thinking' and signature_chars > 5000"
    """
    _run(o, "strip-thinking")


@command("strip-all")
@surgery_options()
@click.option("--tools", default=None, help="Only these tools, comma-separated.")
@click.option("--keep-last-lines", type=click.IntRange(min=0), default=None,
              help="Keep the last N lines of each result.")
def strip_all_cmd(o: SurgeryOptions, tools, keep_last_lines):
    """Example:

    \b
        txdb strip-all SESSION && txdb apply SESSION
        txdb strip-all --where "project like '%myapp%' and on_chain = 1 and pos < 200"
    """
    _run(o, "strip-all", dict(tools=_csv(tools), keep_last_lines=keep_last_lines))


@command("strip-attachments")
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
    """Kept: the newest of each kind, and every queued_command, *_delta,
    skill_listing, hook context, prompt_snapshot and unknown type; children of
    a dropped line are re-parented.

    With --where, exactly the rows of attachment_targets it selects, in every
    session, except what the safety rules keep (keep-all, system-prompt and
    unknown types unless --drop-all --types names them; the leaf).

    Example:

    \b
        txdb strip-attachments SESSION --list
        txdb strip-attachments SESSION --types task_reminder,hook_success --keep-recent 3
        txdb strip-attachments --where "type = 'task_reminder' and age_days > 7"
    """
    type_list = _csv(types)
    if drop_all and not type_list:
        raise click.UsageError("--drop-all needs --types (it can remove what tells the model its tools exist)")
    if list_only and o.where:
        raise click.UsageError("--list takes a SESSION; with --where, --dry-run shows the plan")
    options = dict(types=type_list, keep_recent=keep_recent, drop_all=drop_all, include_free=include_free)
    if list_only:
        _list_attachments(o, attachment_options(dict(options, positions=o.positions)))
        return
    _run(o, "strip-attachments", options)


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


@command("reset-usage")
@surgery_options(where=False, edits=False)
def reset_usage_cmd(o: SurgeryOptions):
    """Caps, never raises: a recorded count only ever goes down. It caps every
    stale turn of the active chain (no --from/--to) and changes no content
    (so no thinking is dropped); `txdb apply` then swaps it in.

    Example:

    \b
        txdb reset-usage SESSION && txdb apply SESSION
    """
    # The op is the reset: the engine's own reset after an edit is not run again.
    _run(dataclasses.replace(o, usage_reset=False, keep_dropped_thinking=True), "reset-usage")
