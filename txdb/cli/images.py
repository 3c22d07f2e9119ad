"""The image commands: list-images and replace-images. One library call each,
typed reports formatted here."""

from __future__ import annotations

import click

from txdb.surgery import images
from txdb.surgery.engine import load_base
from txdb.cli.main import command, db_option
from txdb.cli.output import echo, tabulate, to_json, wide_option
from txdb.cli.surgery import SurgeryOptions, _resolve, _run, surgery_options

@command("list-images")
@click.argument("session")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the images as JSON.")
@wide_option
def list_images_cmd(session, db_path, as_json):
    """Also where each sits and its base64 size; tokens are (w*h)/750, at most 1600.

    Positions are those the next surgery pass uses (the pending copy's when
    there is one). Across every session: `txdb query "select * from image_targets"`.

    Example:

    \b
        txdb list-images SESSION
        txdb list-images SESSION --json | jq -r '.[].sha256' | sort -u
    """
    _conn, orig = _resolve(db_path, session, reading=True)
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


@command("replace-images")
@surgery_options()
@click.option("--dir", "folder", required=True, type=click.Path(file_okay=False),
              help="Folder of transcripts, one <sha256>.txt (UTF-8) per image.")
@click.option("--drop-missing", is_flag=True, help="Drop the images that have no transcript (default: keep them).")
def replace_images_cmd(o: SurgeryOptions, folder, drop_missing):
    """Each image whose transcript exists becomes a text block
    <image sha256="..." media_type="...">TRANSCRIPT</image>; the same image
    in two places gets the same transcript. With --where, the rows of
    image_targets it selects, in every session.

    Example:

    \b
        txdb list-images SESSION
        txdb replace-images SESSION --dir ./image-transcripts --dry-run
        txdb replace-images --where "media_type = 'image/png'" --dir ./image-transcripts
    """
    _run(o, "replace-images", dict(dir=folder, drop_missing=drop_missing))
