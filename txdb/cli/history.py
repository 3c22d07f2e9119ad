"""`txdb history`: the sessions ~/.claude/history.jsonl names, and their prompts."""

from __future__ import annotations

import sys

import click

from txdb.catalog import history as lib
from txdb.cli.main import command, db_option, read_catalog
from txdb.cli.output import echo, emit_rows, format_options


@command("history")
@db_option
@click.argument("session", required=False)
@click.option("--before-txdb", is_flag=True,
              help="Only sessions gone before txdb saw them: their prompts are all that is left.")
@click.option("--project", help="Only projects whose folder name contains this.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many sessions.")
@format_options
def history_cmd(db_path, session, before_txdb, project, limit, fmt):
    """`txdb refresh` reads history.jsonl (beside the projects folder) as it
    grows; a prompt stays in the catalog after Claude Code prunes it. Each
    session's status: on disk, gone (`txdb restore` gives it back), pruned
    (its archive deleted by `txdb prune`) or gone before txdb (swept before
    txdb saw it). With SESSION (an id or its
    first characters), that session's prompts, oldest first. View
    history_sessions, table history; `txdb search` finds prompts too.

    Example:

    \b
        txdb history --before-txdb
        txdb history 3f2a9c1e
        txdb search "migration plan" --kind history
    """
    conn, _ = read_catalog(db_path)
    table = (fmt or ("table" if sys.stdout.isatty() else "json")) == "table"
    if session:
        rows = lib.prompts(conn, session)
        if not rows:
            raise click.ClickException(f"history.jsonl holds no prompt of a session {session}*")
        if table:
            emit_rows(rows, "table", ["session_id", "timestamp", "cwd", "display", "pasted"],
                      drop=["cwd", "pasted"], shrink={"session_id": 12, "display": 40})
        else:
            emit_rows(rows, fmt)
        return
    rows = lib.sessions(conn, before_txdb=before_txdb, project=project, limit=limit)
    if not table:
        emit_rows(rows, fmt)
        return
    held, _sessions, without = lib.counts(conn)
    if not rows:
        if not held:
            echo("No prompts from history.jsonl in the catalog (run `txdb refresh` to read it).")
        elif project:
            echo(f"No session of history.jsonl has a project containing {project!r}"
                 + (" and is gone before txdb." if before_txdb else "."))
        elif before_txdb:
            echo("No session of history.jsonl is gone before txdb.")
        else:
            echo("No session of history.jsonl.")
    else:
        emit_rows(rows, "table", ["session_id", "status", "cwd", "first_prompt", "last_prompt", "prompts",
                                  "first_prompt_text"],
                  drop=["cwd", "first_prompt", "first_prompt_text"],
                  shrink={"session_id": 12, "cwd": 20, "first_prompt_text": 30})
    if without:  # an older release's prompts: no session to list them under
        echo(f"{without:,} prompt{'s name' if without != 1 else ' names'} no session (an older release's): "
             "`txdb query \"select * from history where session_id is null\"`.")
