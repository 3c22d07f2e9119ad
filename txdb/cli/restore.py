"""`txdb restore`: a session Claude Code deleted, given back from the catalog."""

from __future__ import annotations

import click

from txdb.catalog import sessions as catalog
from txdb.surgery import restore as restoremod
from txdb.errors import RestoreError, SessionNotFound
from txdb.cli.main import command, db_option, open_catalog
from txdb.cli.output import echo, terminal_safe, to_json


@command("restore")
@db_option
@click.argument("session", required=False)
@click.option("--where", "where", help="SQL condition over `sessions` choosing the sessions to restore.")
@click.option("--to", "to", type=click.Path(), help="Project folder to write into instead of the old one "
              "(a copy beside a session that still exists).")
@click.option("--dry-run", is_flag=True, help="List what would be written; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print what was (or would be) written as JSON.")
def restore(db_path, session, where, to, dry_run, as_json):
    """SESSION is a session id or id prefix (or choose with --where over the
    `sessions` table). Its .jsonl, its subagent transcripts and the files in
    its folder (tool-results/, persisted/) are rebuilt, checked against the
    sha256 refresh recorded, and written at their old paths (or under --to
    DIR), mode 0600. An existing file is never replaced: a session still on
    disk is refused. A file the catalog cannot give back whole is named and
    nothing is written.

    Example:

    \b
        txdb sessions --gone
        txdb restore 3f2a9c1e --dry-run
        txdb restore --where "last_timestamp >= '2026-01-01'" --to ~/.claude/projects/-home-me-app
    """
    if (session is None) == (where is None):
        raise click.UsageError("name one SESSION or give --where")
    conn, path = open_catalog(db_path)
    if where is not None:
        ids = restoremod.select_sessions(conn, path, where)
        if not ids:
            raise SessionNotFound(f"--where matched no session: {where}")
    else:
        ref = catalog.resolve_session(conn, session)
        if ref.kind != "session":
            raise RestoreError(f"{ref.path} is a subagent transcript: restore the session it belongs to")
        ids = [restoremod.latest_gone(conn, ref.file_id)]
    plans = [restoremod.plan_restore(conn, i, to) for i in ids]  # every check before any write
    written = [] if dry_run else [str(p) for p in restoremod.restore(plans)]
    if written:
        restoremod.refresh_restored(conn, plans)
    if as_json:
        echo(to_json({"dry_run": dry_run, "sessions": [p.as_dict() for p in plans],
                      "written": written}))
        return
    for plan in plans:
        for it in plan.items:
            state = "already there" if it.present else ("would write" if dry_run else "wrote")
            echo(terminal_safe(f"{state} {it.path} ({len(it.data):,} bytes, {it.kind})"))
    files = sum(len(p.items) for p in plans)
    echo(f"{len(plans)} session{'s' if len(plans) != 1 else ''}, {files} file{'s' if files != 1 else ''}"
         + (": dry run, nothing written" if dry_run else f", {len(written)} written"))
