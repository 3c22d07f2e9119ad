"""The commands of the pending copy and the swap: snapshot, apply, undo."""

from __future__ import annotations

import click

from txdb.surgery import pending as pend
from txdb.surgery import select as sel
from txdb.surgery.log import apply_logged
from txdb.cli.main import command, db_option, open_catalog
from txdb.model.chain_health import plural
from txdb.cli.output import catalog_warning, echo, to_json
from txdb.cli.report import print_apply as _print_apply
from txdb.cli.surgery import _resolve

@command("snapshot")
@click.argument("session")
@db_option
@click.option("--refresh", is_flag=True, help="Discard the pending copy and snapshot again.")
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot record as JSON.")
def snapshot_cmd(session, db_path, refresh, as_json):
    """Example:

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


@command("apply")
@click.argument("session", required=False)
@db_option
@click.option("--all-pending", is_flag=True,
              help="Apply every pending copy beside a catalogued session (one refusal does not stop the others).")
@click.option("--dry-run", is_flag=True, help="Run every check; swap nothing.")
@click.option("--no-backup", is_flag=True, help="Do not keep the original as .bak.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def apply_cmd(session, db_path, all_pending, dry_run, no_backup, as_json):
    """Refuses (changing no file) when the original is being written, was
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


def _apply_all(db_path, *, dry_run, no_backup, as_json):
    conn, _ = open_catalog(db_path)
    odd: list = []
    paths = sel.all_pending(conn, odd)
    if odd:  # never opened (a FIFO would hang a read): named so that nothing is passed over silently
        echo("Warning: not a pending copy (no regular file at its name), skipped: "
             + "; ".join(f"{p} ({what})" for p, what in odd), err=True)
    outs = sel.apply_all(conn, paths, dry_run=dry_run, backup=not no_backup)
    refused = [o for o in outs if o.error]
    if as_json:
        echo(to_json([o.as_dict() for o in outs]))
    else:
        if not outs:
            echo("No pending copies.")
        for o in outs:
            for w in o.warnings:
                echo(f"Warning: {w}", err=True)
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
@command("undo")
@click.argument("session")
@db_option
@click.option("--dry-run", is_flag=True, help="Run every check; restore nothing.")
@click.option("--force", is_flag=True,
              help="Restore a backup that is not the file the surgery replaced (verify's verdict on it is shown first).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def undo_cmd(session, db_path, dry_run, force, as_json):
    """Refuses (changing nothing) when the session changed since that surgery
    wrote it, is being written, has a pending copy, or the backup is not
    the file the surgery replaced (its sha256 as recorded at apply; --force
    restores it anyway, after showing verify's verdict) or does not verify.
    The replaced file is kept as a backup of its own (so undo again redoes),
    and the undo is logged in `surgeries`. A fork is not undone: delete it.

    Example:

    \b
        txdb undo SESSION --dry-run
        txdb undo SESSION
    """
    from txdb.surgery.undo import undo

    conn, orig = _resolve(db_path, session)
    rep = undo(conn, orig, dry_run=dry_run, force=force)
    if as_json:
        echo(to_json(rep.as_dict()))
        return
    for w in rep.warnings:
        echo(f"Warning: {w}", err=True)
    if rep.forced:
        c = rep.verdict["counts"]
        echo(f"--force: {rep.forced}")
        echo(f"verify {rep.restored_from}: {'OK' if rep.verdict['ok'] else 'FAIL'} ({rep.verdict['records']:,} "
             f"records, chain of {rep.verdict['chain_length']:,}; {c['error']} errors, {c['warning']} warnings)")
        for f in rep.verdict["findings"][:5]:
            echo(f"  {f['severity']}: {f['code']}: {f['message']}")
    passes = ", ".join(f"#{i} {c}" for i, c in zip(rep.undid, rep.commands)) or ", ".join(rep.commands)
    kept = (f"the {plural(rep.sidecars_kept, 'sidecar file')} it wrote in {rep.sidecars_folder} "
            if rep.sidecars_kept else "")
    if dry_run:
        echo(f"Dry run: every check passed; undo would restore {rep.restored_from} ({rep.size_before:,} -> "
             f"{rep.size_after:,} bytes), undoing {passes}.")
        if kept:
            echo(f"It would keep {kept}(nothing is lost; `txdb undo` again redoes the surgery).")
        return
    echo(f"Undone: {passes}\nRestored: {rep.original} ({rep.size_before:,} -> {rep.size_after:,} bytes) "
         f"from {rep.restored_from}\nThe replaced file is kept as: {rep.backup}")
    if kept:
        echo(f"Kept: {kept}(the replaced file names them; `txdb undo` again redoes the surgery).")
    if rep.catalog_error:
        echo(catalog_warning("undone", rep.catalog_error), err=True)
