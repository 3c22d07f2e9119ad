"""``txdb rescue``: its declaration's op (one ``rescue.RescueOp``) through the surgery path
(``surgery._run``: SESSION or --where, pending copy, --fork, --dry-run,
--apply, --json); the plan (each step and the estimate after it) is part of
the pass's report."""

from __future__ import annotations

import click

from txdb.surgery import rescue
from txdb.cli.main import command
from txdb.cli.surgery import SurgeryOptions, _run, surgery_options


@command("rescue")
@surgery_options(ranged=False)
@click.option("--target", type=click.IntRange(min=1), default=None,
              help=f"Context to get under, in tokens (default: the window less "
                   f"{rescue.MARGIN:,}, Claude Code's output reserve and auto-compact buffer, less the room "
                   f"the largest system prompt among known releases needs: "
                   f"{rescue.WINDOW - rescue.MARGIN - rescue.release_room('2.1.328')[0]:,} for a 200k window "
                   f"on 2.1.328).")
@click.option("--window", default=None, metavar="200k|1m|N",
              help="The window the session is resumed in (default: 1M for a [1m] model, else 200k).")
@click.option("--summary", default=None,
              help="What the compacted span was about, should rescue have to compact one (default: one "
                   "extracted from it: prompts, files, commands, tools).")
@click.option("--keep-recent", type=click.IntRange(min=0), default=rescue.DEFAULT_KEEP_RECENT, show_default=True,
              help="Newest tool results and texts left in place.")
def rescue_cmd(o: SurgeryOptions, target, window, summary, keep_recent):
    """First superseded attachments, then tool results, thinking and large
    texts moved to sidecar files (oldest first), and only then the oldest
    closed span compacted; it stops as soon as the estimate is 2% under the target (the
    most the estimate reads under what Claude Code sends).
    Refused (nothing written) when even that is not enough.

    Example:

    \b
        txdb rescue SESSION --dry-run
        txdb rescue SESSION --target 120000 --apply
        txdb rescue SESSION --window 1m
        txdb rescue --where "est_context_tokens > 150000" --apply
    """
    if window is not None:
        rescue.parse_window(window)  # a bad --window is refused before any session is read
    _run(o, "rescue", dict(target=target, window=window, summary=summary, keep_recent=keep_recent))
