"""`txdb search`: the full-text views (search_messages, search_thinking,
search_tool_output, search_tool_input; search_blocks for all of them) from
the command line, ranked by FTS5, each hit with a readable excerpt."""

from __future__ import annotations

import sqlite3

from txdb.catalog import db
from txdb.errors import QueryError

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
    """``text`` as an FTS5 query: each word a quoted string, all of them
    required, and a part in double quotes (``"prompt is too long"``) one
    phrase, its words next to each other in that order. Punctuation
    (``foo-bar``, a lone quote) is searched for as typed, never an FTS5
    syntax error: an unmatched quote counts as a character."""
    terms = []
    parts = text.split('"')
    if len(parts) % 2 == 0:  # an odd number of quotes: the last one is text
        parts[-2:] = ['"'.join(parts[-2:])]
    for i, part in enumerate(parts):
        words = part.split()
        if not words:
            continue
        if i % 2:  # inside quotes
            terms.append(_fts_string(" ".join(words)))
        else:
            terms.extend(_fts_string(w) for w in words)
    if not terms:
        raise QueryError("search: give a word to look for")
    return " ".join(terms)


def _fts_string(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


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
