"""The compacting commands: compact --before (a new session) and compact-range
(positions collapsed into one marker message, in a pending copy or a fork)."""

from __future__ import annotations

import click

from txdb.cli.main import command, db_option
from txdb.cli.surgery import _NO_BACKUP, SurgeryOptions, _run, surgery_options

@command("compact")
@click.argument("session")
@db_option
@click.option("--before", "before", type=click.IntRange(min=0), required=True,
              help="First chain position to keep; everything before it becomes the summary.")
@click.option("--fork-title", default=None, help="Title of the new session (default: '<title> (Stripped)').")
@click.option("--keep-dropped-thinking", is_flag=True,
              help="Keep the kept part's thinking blocks the API will drop after the new history.")
@click.option("--dry-run", is_flag=True, help="Run everything; write nothing.")
@_NO_BACKUP
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def compact_cmd(session, db_path, before, fork_title, keep_dropped_thinking, dry_run, no_backup, as_json):
    """The summary is of the dialogue only, behind a compact boundary.

    The original is untouched; resume the new one with `claude -r <id>`.
    Cut at a user prompt (`txdb analyze` lists them): a cut between a tool
    call and its result is refused.

    Example:

    \b
        txdb compact SESSION --before 150 --dry-run
        txdb compact SESSION --before 150 && claude -r <new id>
    """
    o = SurgeryOptions(session, db_path, dry_run=dry_run, fork=True, fork_title=fork_title, as_json=as_json,
                       keep_dropped_thinking=keep_dropped_thinking,
                       arguments={"before": before, **({"fork_title": fork_title} if fork_title else {})})
    _run(o, "compact", dict(before=before))
@command("compact-range")
@surgery_options()
@click.option("--summary", default=None, help="What the range was about (default: a placeholder).")
def compact_range_cmd(o: SurgeryOptions, summary):
    """The marker is <persisted-range> (summary, preview of the first
    messages); each record of the range is saved whole to
    <session>/persisted/message/<uuid>.json.

    Refuses a range that holds the leaf or cuts a tool call from its result.
    Running it again changes nothing but a new --summary; --pos N on one
    survivor an older tool left in a system or attachment record makes it a
    plain user message. With --where, each run of consecutive chain_targets rows
    it selects in a session is one range. Positions are the pending copy's
    when there is one: compact several ranges from the last one back.

    Example:

    \b
        txdb compact-range SESSION --from 46 --to 77 --summary "Audit done: 21 issues filed"
        txdb compact-range SESSION --from 10 --to 30 --fork --fork-title "scope-X"
        txdb compact-range --where "session_id = 'abc...' and pos between 10 and 30"
    """
    if not o.where and (o.frm is None or o.to is None):
        raise click.UsageError("compact-range needs --from and --to (or --pos N)")
    _run(o, "compact-range", dict(summary=summary))
