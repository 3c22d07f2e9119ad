"""`txdb restore`: a session Claude Code deleted, given back from the catalog."""

from __future__ import annotations

import click

from txdb import config
from txdb.surgery import restore as restoremod
from txdb.errors import NothingMissing, RestoreError, SessionNotFound
from txdb.cli.main import command, db_option, folders_given, open_catalog
from txdb.cli.output import echo, terminal_safe, to_json

AGAIN_SHOWN = 10  # the files named under the note that the next start deletes them again


def _taken_note(taken: dict, does: str) -> str:
    """The line saying which session a SESSION argument was taken as (``restoremod.taken_as``)."""
    return terminal_safe(f"Note: {taken['named']} was taken as session {taken['session_id']} "
                         f"({taken['session_path']}), {does}.")


@command("restore")
@db_option
@click.argument("session", required=False)
@click.option("--where", "where", help="SQL condition over `sessions` choosing the sessions to restore.")
@click.option("--to", "to", type=click.Path(), help="Project folder to write into instead of the old one "
              "(a copy beside a session that still exists).")
@click.option("--root", "roots", multiple=True, type=click.Path(file_okay=False), callback=folders_given,
              help="Projects folder a session may be restored into in place (repeatable; default: "
                   "$CLAUDE_CONFIG_DIR/projects or ~/.claude/projects).")
@click.option("--dry-run", is_flag=True, help="List what would be written; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print what was (or would be) written as JSON.")
def restore(db_path, session, where, to, roots, dry_run, as_json):
    """SESSION is a session id or id prefix (or choose with --where over the
    `sessions` table). Its .jsonl, its subagent transcripts and the files in
    its folder (tool-results/, persisted/) are rebuilt, checked against the
    sha256 refresh recorded, and written at their old paths (or under --to
    DIR) with the mode and mtime they had; in place, only under a projects
    folder (--root, else the default). An existing file is never
    replaced: a session still on disk whole is refused; beside a live
    session, only its missing files (a deleted subagent transcript) are
    written. A file the catalog cannot give back whole is named and nothing
    is written. A restored file is the catalogued one: the next refresh
    reads nothing. A --to copy is not catalogued (a refresh of its folder
    indexes it); SESSION always means the original (a subagent transcript's
    path or name stands for its session: a note says so). With --where, a session
    that cannot be restored is named, the others are restored, and the exit
    status is 1 (a session with nothing missing is named, and is no failure).

    Example:

    \b
        txdb sessions --gone
        txdb restore 3f2a9c1e --dry-run
        txdb restore --where "last_timestamp >= '2026-01-01'" --to ~/.claude/projects/-home-me-app
    """
    if (session is None) == (where is None):
        raise click.UsageError("name one SESSION or give --where")
    conn, path = open_catalog(db_path)
    under = config.projects_roots(roots)
    skipped: list[str] = []
    failed = 0  # of those skipped, the sessions that could not be given back (not those with nothing missing)
    taken_as: list[dict] = []  # SESSION taken as another session than it names (a subagent transcript's)
    if where is not None:
        ids = restoremod.select_sessions(conn, path, where)
        if not ids:
            raise SessionNotFound(f"--where matched no session: {where}")
        plans = []
        for i in ids:  # every check before any write; one session that cannot be restored stops no other
            try:
                plans.append(restoremod.plan_restore(conn, restoremod.latest_gone(conn, i), to, verify=dry_run,
                                                     roots=under))
            except RestoreError as e:
                skipped.append(str(e))
                failed += not isinstance(e, NothingMissing)
        plans, clashes = restoremod.one_plan_per_target(plans)
        skipped += clashes
        failed += len(clashes)
        if not plans:
            raise RestoreError(f"none of the {len(ids)} sessions --where matched can be restored: {skipped[0]}"
                               + (f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""))
    else:
        chosen = restoremod.choose(conn, session)
        taken = restoremod.taken_as(conn, session, chosen)
        if taken is not None:
            taken_as.append(taken)
        plans = [restoremod.plan_restore(conn, chosen, to, verify=dry_run, roots=under)]
    written = [] if dry_run else [str(p) for p in restoremod.restore(plans, each=where is not None)]
    if not dry_run:
        restoremod.register_restored(conn, plans)
        skipped += [p.failed for p in plans if p.failed]
        failed += sum(1 for p in plans if p.failed)
        plans = [p for p in plans if not p.failed]
        if not plans:
            raise RestoreError(skipped[0] + (f" (and {len(skipped) - 1} more sessions not restored)"
                                             if len(skipped) > 1 else ""))
    again = [] if dry_run else restoremod.due_again(conn, plans, config.claude_config_dir())
    if as_json:
        echo(to_json({"dry_run": dry_run, "sessions": [p.as_dict() for p in plans], "taken_as": taken_as,
                      "written": written, "not_restored": skipped, "deleted_again_at_next_start": [
                          str(p) for p, _days, _source in again]}))
        if failed:  # a script must not take a partial restore for a whole one (as `rescue --where`)
            raise click.exceptions.Exit(1)
        return
    for t in taken_as:
        echo(_taken_note(t, "whose files " + ("would be" if dry_run else "were") + " given back"))
    wrote = set(written)
    for plan in plans:
        for it in plan.items:
            # a file another restore wrote meanwhile (the same bytes) was not written by this one
            there = it.present or (not dry_run and str(it.path) not in wrote)
            state = "already there" if there else ("would write" if dry_run else "wrote")
            echo(terminal_safe(f"{state} {it.path} ({it.size:,} bytes, {it.kind})"))
    for why in skipped:
        echo(terminal_safe(f"not restored: {why}"))
    if again:
        _p, days, source = again[0]
        echo(terminal_safe(
            f"Note: {len(again)} of the files written go{'es' if len(again) == 1 else ''} by an mtime more than "
            f"{days} days old (cleanupPeriodDays, {'Claude Code default' if source == 'default' else source}; "
            "a file in a session's folder goes by its session file's): Claude Code's next start deletes them "
            "again; `touch` them and the session file, or raise cleanupPeriodDays, to keep them:"), err=True)
        for p, _days, _source in again[:AGAIN_SHOWN]:
            echo(terminal_safe(f"    {p}"), err=True)
        if len(again) > AGAIN_SHOWN:
            echo(f"    ... and {len(again) - AGAIN_SHOWN} more (--json lists them all)", err=True)
    files = sum(len(p.items) for p in plans)
    there = sum(it.present for p in plans for it in p.items)
    echo(f"{len(plans)} session{'s' if len(plans) != 1 else ''}, {files} file{'s' if files != 1 else ''}"
         + ((f" ({there} already there)" if there else "") + ": dry run, nothing written" if dry_run
            else f", {len(written)} written")
         + (f"; {len(skipped)} not restored" if skipped else ""))
    if failed:  # a script must not take a partial restore for a whole one (as `rescue --where`)
        raise click.exceptions.Exit(1)


@command("prune")
@db_option
@click.argument("sessions", nargs=-1)
@click.option("--all-gone", is_flag=True, help="Every gone file's archive (with --yes; without it, a dry run).")
@click.option("--yes", is_flag=True, help="Delete with --all-gone (without it --all-gone only counts).")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the count as JSON.")
def prune(db_path, sessions, all_gone, yes, dry_run, as_json):
    """Delete from the catalog the archive of sessions whose files are gone
    from disk (after that, `txdb restore` cannot give them back). Only gone
    rows are deleted, never a live session's. Their usage rows go with
    them, so `txdb cost` no longer counts what those sessions spent: its
    totals drop. Name each SESSION
    (id, prefix or path; a subagent transcript's stands for its session, and
    a note says so), or give --all-gone, which deletes only with --yes;
    --dry-run prints what would go (files, lines, bytes) and deletes nothing.

    Example:

    \b
        txdb prune --all-gone --dry-run
        txdb prune 3f2a9c1e
        txdb prune --all-gone --yes
    """
    from txdb.catalog.ingest.store import prune_gone

    if bool(sessions) == all_gone:
        raise click.UsageError("name each SESSION to prune, or give --all-gone (--dry-run counts first)")
    conn, _path = open_catalog(db_path)
    ids = None if all_gone else [restoremod.choose(conn, s) for s in sessions]
    # a name taken as another session (a live subagent transcript's path: its gone session)
    taken_as = [t for s, i in zip(sessions, ids or []) if (t := restoremod.taken_as(conn, s, i)) is not None]
    dry = dry_run or (all_gone and not yes)
    report = prune_gone(conn, ids, dry_run=dry)
    if as_json:
        echo(to_json({**report.__dict__, "taken_as": taken_as}))
        return
    for t in taken_as:
        echo(_taken_note(t, "whose archive " + ("would go" if dry else "went")))
    what = (f"the archive of {report.sessions:,} session{'s' if report.sessions != 1 else ''}: "
            f"{report.files:,} file{'s' if report.files != 1 else ''}, {report.lines:,} lines, "
            f"{report.bytes / 1e6:.1f} MB")
    if not dry:
        echo(f"deleted {what}")
    elif all_gone and not yes and not dry_run:
        echo(f"would delete {what}; nothing deleted (txdb prune --all-gone --yes deletes it)")
    else:
        echo(f"would delete {what}: dry run, nothing deleted")
