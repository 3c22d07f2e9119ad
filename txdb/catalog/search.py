"""`txdb search`: the full-text views (search_messages, search_thinking,
search_tool_output, search_tool_input; search_blocks for all of them) and
the prompts of history.jsonl (history_fts) from the command line, ranked by
FTS5, each hit with a readable excerpt."""

from __future__ import annotations

import sqlite3

from txdb.catalog import db
from txdb.catalog.ingest.chunks import WHOLE_TEXT
from txdb.errors import QueryError

# --kind -> the view that holds that kind of block (sql/views/7b..7e).
KINDS = {
    "messages": "search_messages",
    "thinking": "search_thinking",
    "tool-output": "search_tool_output",
    "tool-input": "search_tool_input",
}
ALL = "search_blocks"
HISTORY = "history"  # --kind history: only the prompts of history.jsonl (table history)
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


def _excerpts(conn: sqlite3.Connection, query: str, rows: list[dict]) -> None:
    """Each hit's ``excerpt`` (its block's rowid until then): FTS5's
    ``snippet()`` of the block's whole text. ``blocks_fts`` holds no text
    (contentless, migration 038), so the hits' texts (a cut one decoded)
    are indexed again in memory, where snippet() reads them."""
    if not rows:
        return
    ids = sorted({r["excerpt"] for r in rows})
    texts = conn.execute(f"SELECT b.rowid, {WHOLE_TEXT.format('b')} FROM blocks b WHERE b.rowid IN "
                         f"({', '.join('?' * len(ids))})", ids).fetchall()
    mem = sqlite3.connect(":memory:")
    try:
        mem.execute("CREATE VIRTUAL TABLE hit USING fts5(text)")
        mem.executemany("INSERT INTO hit (rowid, text) VALUES (?, ?)", texts)
        snippets = dict(mem.execute(
            f"SELECT rowid, snippet(hit, 0, '{MARK_START}', '{MARK_END}', '{CUT}', {EXCERPT_TOKENS}) "
            "FROM hit WHERE hit MATCH ?", (query,)))
    finally:
        mem.close()
    whole = dict(texts)
    for r in rows:
        rowid = r["excerpt"]
        r["excerpt"] = snippets.get(rowid) or " ".join((whole.get(rowid) or "").split()[:EXCERPT_TOKENS])


def _fts_string(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def search(conn: sqlite3.Connection, text: str, kind: str | None = None, limit: int | None = 20) -> list[dict]:
    """The blocks whose text holds every word of ``text`` (FTS5 rank, best
    first): their session, where they are, and an excerpt around the match
    (FTS5 ``snippet()`` of the whole text, on one line: ``_excerpts``)."""
    query = fts_query(text)
    tail = " ORDER BY rank" + (" LIMIT ?" if limit is not None else "")
    params = (query,) + ((limit,) if limit is not None else ())
    rows = []
    if kind != HISTORY:
        view = KINDS[kind] if kind else ALL
        rows = db.rows(conn, (
            "SELECT f.session_id, v.project, v.title, v.timestamp, v.role, v.kind, v.tool_name, v.line, "
            "blocks_fts.rowid AS excerpt, v.file_id, f.path, blocks_fts.rank AS rank "
            f"FROM blocks_fts JOIN {view} v ON v.block_rowid = blocks_fts.rowid "
            "JOIN files f ON f.id = v.file_id "
            "WHERE blocks_fts MATCH ?" + tail), params)
        _excerpts(conn, query, rows)
    if kind in (None, HISTORY):
        # A prompt of history.jsonl: its session's title and file when catalogued.
        rows += db.rows(conn, (
            "SELECT h.session_id, h.project, s.title, h.timestamp, 'user' AS role, 'history' AS kind, "
            "NULL AS tool_name, NULL AS line, "
            f"snippet(history_fts, -1, '{MARK_START}', '{MARK_END}', '{CUT}', {EXCERPT_TOKENS}) AS excerpt, "
            "hs.file_id, h.source AS path, history_fts.rank AS rank "
            "FROM history_fts JOIN history h ON h.id = history_fts.rowid "
            "LEFT JOIN history_sessions hs ON hs.session_id = h.session_id "
            "LEFT JOIN sessions s ON s.file_id = hs.file_id "
            "WHERE history_fts MATCH ?" + tail), params)
        rows.sort(key=lambda r: r["rank"])
        rows = rows[:limit] if limit is not None else rows
    for r in rows:
        del r["rank"]
        r["excerpt"] = " ".join((r["excerpt"] or "").split())
    return rows
