"""`txdb search`: full-text search of the catalog (the search_* views)."""

from __future__ import annotations

import sys

import click

from txdb.catalog import search as lib
from txdb.cli.main import command, db_option, read_catalog
from txdb.cli.output import echo, emit_rows, format_options


@command("search")
@db_option
@click.argument("text")
@click.option("--kind", type=click.Choice([*lib.KINDS, lib.HISTORY]),
              help="Only this kind of block, or only the prompts of history.jsonl (default: all).")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="At most this many hits.")
@format_options
def search_cmd(db_path, text, kind, limit, fmt):
    """Every word of TEXT must appear (punctuation is searched as typed, as in
    Datasette's search box); words in double quotes inside TEXT are a phrase,
    next to each other in that order; hits come best first, each with its session
    and an excerpt around the words (marked with » «). The same index as
    the search_* views of `txdb serve`; prompts from ~/.claude/history.jsonl
    (kind history) are found too, those of sessions swept before txdb among them.

    Example:

    \b
        txdb search '"prompt is too long"' --limit 5
        txdb search pytest --kind tool-output --json | jq -r '.[].session_id' | sort -u
    """
    conn, _ = read_catalog(db_path)
    rows = lib.search(conn, text, kind=kind, limit=limit)
    if (fmt or ("table" if sys.stdout.isatty() else "json")) == "table":
        if not rows:
            echo("No matches.")
            return
        emit_rows(rows, "table", ["session_id", "timestamp", "kind", "tool_name", "title", "excerpt"],
                  drop=["tool_name", "title", "timestamp"], shrink={"session_id": 12, "title": 16, "excerpt": 30})
    else:
        emit_rows(rows, fmt)
