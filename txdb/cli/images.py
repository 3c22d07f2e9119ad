"""The image, compact and undo commands: list-images, replace-images,
compact --before, undo. Same shape as ``surgery``: one library call each,
typed reports formatted here."""

from __future__ import annotations

import click

from ..surgery import images
from ..surgery.engine import load_base
from .main import cli, db_option
from .output import catalog_warning, echo, tabulate, to_json
from .surgery import _NO_BACKUP, SurgeryOptions, _resolve, _run, surgery_options


@cli.command("list-images")
@click.argument("session")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the images as JSON.")
def list_images_cmd(session, db_path, as_json):
    """Every image of a session: chain position, where it sits, media type,
    pixel size, tokens ((w*h)/750, at most 1600), base64 size, sha256.

    Positions are those the next surgery pass uses (the pending copy's when
    there is one). Across every session: `txdb query "select * from image_targets"`.

    Example:

    \b
        txdb list-images SESSION
        txdb list-images SESSION --json | jq -r '.[].sha256' | sort -u
    """
    _conn, orig = _resolve(db_path, session)
    t, _original, _had, _meta = load_base(orig)
    refs = images.list_images(t)
    if as_json:
        echo(to_json([r.as_dict() for r in refs]))
        return
    if not refs:
        echo("No images.")
        return
    rows = []
    for r in refs:
        size = f"{r.width}x{r.height}" if r.width and r.height else "?"
        rows.append(["-" if r.pos is None else r.pos, r.line,
                     "message" if r.where == "message" else f"tool_result {r.tool_use_id or ''}".strip(),
                     r.media_type or "?", size, r.tokens, f"{r.base64_chars:,}",
                     r.sha256 or ("(no base64 data)" if not r.base64_chars else "(invalid base64)")])
    echo(tabulate(rows, headers=["pos", "line", "where", "media type", "pixels", "tokens", "base64 chars",
                                 "sha256"]))
    unique = {r.sha256 for r in refs if r.sha256}
    on_chain = [r for r in refs if r.pos is not None]
    echo(f"{len(refs)} images ({len(unique)} distinct), {len(on_chain)} on the active chain: "
         f"~{sum(r.tokens for r in on_chain):,} tokens; {sum(r.base64_chars for r in refs):,} base64 chars on disk.")
    bad = sum(1 for r in refs if r.sha256 is None)
    if bad:
        echo(f"{bad} image(s) hold invalid base64 (the API refuses them): drop them with "
             f"txdb replace-images SESSION --dir DIR --drop-missing")


@cli.command("replace-images")
@surgery_options()
@click.option("--dir", "folder", required=True, type=click.Path(file_okay=False),
              help="Folder of transcripts, one <sha256>.txt (UTF-8) per image.")
@click.option("--drop-missing", is_flag=True, help="Drop the images that have no transcript (default: keep them).")
def replace_images_cmd(o: SurgeryOptions, folder, drop_missing):
    """Replace images with text transcripts (<sha256>.txt in --dir).

    Each image whose transcript exists becomes a text block
    <image sha256="..." media_type="...">TRANSCRIPT</image>; the same image
    in two places gets the same transcript. With --where, the rows of
    image_targets it selects, in every session.

    Example:

    \b
        txdb list-images SESSION
        txdb replace-images SESSION --dir ./image-transcripts --dry-run
        txdb replace-images --where "media_type = 'image/png'" --dir ./image-transcripts
    """
    _run(o, "replace-images",
         lambda t, _o: images.replace_images(t, folder, drop_missing=drop_missing, positions=o.positions),
         dict(dir=folder, drop_missing=drop_missing))


@cli.command("undo")
@click.argument("session")
@db_option
@click.option("--dry-run", is_flag=True, help="Run every check; restore nothing.")
@click.option("--force", is_flag=True,
              help="Restore a backup that is not the file the surgery replaced (verify's verdict on it is shown first).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def undo_cmd(session, db_path, dry_run, force, as_json):
    """Put back the backup of a session's last applied surgery.

    Refuses (changing nothing) when the session changed since that surgery
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
    from ..surgery.undo import undo

    conn, orig = _resolve(db_path, session)
    rep = undo(conn, orig, dry_run=dry_run, force=force)
    if as_json:
        echo(to_json(rep.as_dict()))
        return
    if rep.forced:
        c = rep.verdict["counts"]
        echo(f"--force: {rep.forced}")
        echo(f"verify {rep.restored_from}: {'OK' if rep.verdict['ok'] else 'FAIL'} ({rep.verdict['records']:,} "
             f"records, chain of {rep.verdict['chain_length']:,}; {c['error']} errors, {c['warning']} warnings)")
        for f in rep.verdict["findings"][:5]:
            echo(f"  {f['severity']}: {f['code']}: {f['message']}")
    passes = ", ".join(f"#{i} {c}" for i, c in zip(rep.undid, rep.commands)) or ", ".join(rep.commands)
    if dry_run:
        echo(f"Dry run: every check passed; undo would restore {rep.restored_from} ({rep.size_before:,} -> "
             f"{rep.size_after:,} bytes), undoing {passes}.")
        return
    echo(f"Undone: {passes}\nRestored: {rep.original} ({rep.size_before:,} -> {rep.size_after:,} bytes) "
         f"from {rep.restored_from}\nThe replaced file is kept as: {rep.backup}")
    if rep.catalog_error:
        echo(catalog_warning("undone", rep.catalog_error), err=True)


@cli.command("compact")
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
    """Write a new session: a dialogue-only summary of the chain before
    position N behind a compact boundary, then positions N.. intact.

    The original is untouched; resume the new one with `claude -r <id>`.
    Cut at a user prompt (`txdb analyze` lists them): a cut between a tool
    call and its result is refused.

    Example:

    \b
        txdb compact SESSION --before 150 --dry-run
        txdb compact SESSION --before 150 && claude -r <new id>
    """
    from ..surgery.compact import compact_before

    o = SurgeryOptions(session, db_path, dry_run=dry_run, fork=True, fork_title=fork_title, as_json=as_json,
                       keep_dropped_thinking=keep_dropped_thinking,
                       arguments={"before": before, **({"fork_title": fork_title} if fork_title else {})})

    def op(t, original):
        from ..surgery.usage import context_estimator
        return compact_before(t, before, source=str(original.path), pre_tokens=context_estimator(original)(original))
    _run(o, "compact", op)
