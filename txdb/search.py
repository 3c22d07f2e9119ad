"""`txdb search`: the full-text views (search_messages, search_thinking,
search_tool_output, search_tool_input; search_blocks for all of them) from
the command line, ranked by FTS5, each hit with a readable excerpt."""

from __future__ import annotations

import sqlite3

from . import db
from .errors import QueryError

# --kind -> the view that holds that kind of block (sql/views/7b..7e).
KINDS = {
    "messages": "search_messages",
    "thinking": "search_thinking",
    "tool-output": "search_tool_output",
    "tool-input": "search_tool_input",
}
ALL = "search_blocks"
# Where the words matched in an excerpt, and where the text was cut.
MARK_START, MARK_END, CUT = "\u00bb", "\u00ab", "\u2026"
EXCERPT_TOKENS = 24


def fts_query(text: str) -> str:
    """Each word of ``text`` as a quoted FTS5 string, all of them required:
    what Datasette's search box does (``searchmode: escaped``), so punctuation
    (``foo-bar``, a lone quote) is searched for, never an FTS5 syntax error."""
    words = text.split()
    if not words:
        raise QueryError("search: give a word to look for")
    return " ".join('"' + w.replace('"', '""') + '"' for w in words)


def search(conn: sqlite3.Connection, text: str, kind: str | None = None, limit: int | None = 20) -> list[dict]:
    """The blocks whose text holds every word of ``text`` (FTS5 rank, best
    first): their session, where they are, and an excerpt around the match
    (FTS5 ``snippet()``, on one line)."""
    view = KINDS[kind] if kind else ALL
    sql = (
        "SELECT f.session_id, v.project, v.title, v.timestamp, v.role, v.kind, v.tool_name, v.line, "
        f"snippet(blocks_fts, 0, '{MARK_START}', '{MARK_END}', '{CUT}', {EXCERPT_TOKENS}) AS excerpt, "
        "v.file_id, f.path "
        f"FROM blocks_fts JOIN {view} v ON v.block_rowid = blocks_fts.rowid "
        "JOIN files f ON f.id = v.file_id "
        "WHERE blocks_fts MATCH ? ORDER BY blocks_fts.rank"
        + (" LIMIT ?" if limit is not None else "")
    )
    params = (fts_query(text),) + ((limit,) if limit is not None else ())
    rows = db.rows(conn, sql, params)
    for r in rows:
        r["excerpt"] = " ".join((r["excerpt"] or "").split())
    return rows
