"""``txdb fork``: a copy of a session under a new session id."""

from __future__ import annotations

import click

from txdb.cli.main import command, db_option
from txdb.cli.surgery import _NO_BACKUP, SurgeryOptions, _run

@command("fork")
@click.argument("session")
@db_option
@click.option("--fork-title", default=None, help="Title of the fork (default: '<title> (Stripped)').")
@click.option("--dry-run", is_flag=True, help="Report only; write nothing.")
@_NO_BACKUP
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def fork_cmd(session, db_path, fork_title, dry_run, no_backup, as_json):
    """Example:

    \b
        txdb fork SESSION --fork-title "checkpoint"
    """
    o = SurgeryOptions(session, db_path, dry_run=dry_run, fork=True, fork_title=fork_title, usage_reset=False,
                       keep_dropped_thinking=True, as_json=as_json)
    _run(o, "fork")
