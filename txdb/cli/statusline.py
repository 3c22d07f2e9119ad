"""`txdb statusline`: the line for Claude Code's statusLine setting."""

from __future__ import annotations

import sys

import click

from txdb import config
from txdb.cli.main import command, db_option
from txdb.cli.output import echo, to_json


@command("statusline")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the figures behind the line as JSON.")
def statusline_cmd(db_path, as_json):
    """Print one status line for the Claude Code session whose statusLine
    payload (JSON) is on stdin: the model, the context txdb estimates for
    the session against its window, what the session and today (your local
    day) cost, and the time left in the current 5-hour block.

    It reads the catalog read-only and never fails: what it cannot know
    (no catalog, a session not catalogued yet, a payload that is not JSON)
    it leaves out, and it always exits 0. Keep the catalog current with the
    plugin's hook (`txdb plugin`) or `txdb refresh --watch`.

    Example:

    \b
        # ~/.claude/settings.json
        {"statusLine": {"type": "command", "command": "txdb statusline"}}
        echo '{"session_id": "5a73f7d9-..."}' | txdb statusline
    """
    from txdb.catalog import statusline as lib

    data = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read(lib.MAX_PAYLOAD)
    payload = lib.parse_payload(data)
    try:
        st = lib.status(db_path or config.default_db_path(), payload)
    except Exception as e:  # a status line must never fail: say what the payload alone tells
        st = lib.fallback(payload, f"txdb: {type(e).__name__}")
    echo(to_json(st.as_dict()) if as_json else st.line())
