"""Read one session's tool calls and thinking blocks from the catalog
(`txdb show-tool`, `txdb show-thinking`): sizes to decide what to persist
or strip, and one call or block in full with the chain around it.

Positions are those of the ``active_chain`` view (what ``--pos`` and
``--from/--to`` of the surgery commands take). A pending copy or backup is
read through ``catalog.reading`` (a throwaway catalog of that file), so its
positions are its own. Whether a block is already persisted comes from the
``persisted`` view, the one SQL statement of what a marker is.
"""

from __future__ import annotations

import re
import sqlite3

from txdb.catalog import db
from txdb.catalog.ingest.chunks import WHOLE_TEXT
from txdb.catalog.sessions import SessionRef, file_info, reading
from txdb.errors import NoSuchTarget
from txdb.model.records import MARK as STRIPPED_MARK

EXCERPT_CHARS = 100
_SPACE = re.compile(r"\s+")


_rows = db.rows


def _persisted(conn, file_id: int) -> dict[tuple[int, int], dict]:
    """(line, block) -> the persisted row of each marker in the file."""
    rows = _rows(conn, "SELECT line, block, kind, sidecar_path, original_chars, summary "
                       "FROM persisted WHERE file_id = ?", (file_id,))
    return {(r.pop("line"), r.pop("block")): r for r in rows}


def _chain_end(conn, file_id: int) -> int | None:
    (last,) = conn.execute("SELECT max(pos) FROM chain WHERE file_id = ?", (file_id,)).fetchone()
    return last


def _header(conn, ref: SessionRef, file_id: int) -> dict:
    (sid,) = conn.execute("SELECT session_id FROM files WHERE id = ?", (file_id,)).fetchone()
    end = _chain_end(conn, file_id)
    return {"file": file_info(ref), "session_id": sid, "chain_length": 0 if end is None else end + 1}


# -- tool calls ----------------------------------------------------------------

_TOOL_CALLS = """
SELECT c.pos, r.line, u.idx, u.tool_use_id, u.tool_name,
       u.chars AS input_chars, u.tokens AS input_tokens,
       rc.pos AS result_pos, rr.line AS result_line, t.idx AS result_idx,
       t.chars AS result_chars, t.tokens AS result_tokens, t.is_error, t.images AS result_images,
       -- a cut input's mark may be past its stored start: looked for in its whole text
       CASE WHEN instr(u.text, :mark) > 0 THEN 1 WHEN u.cut = 1 THEN instr(txdb_text(u.file_id, u.offset, u.idx), :mark) > 0
            ELSE 0 END AS input_stripped,
       substr(t.text, 1, length(:mark)) = :mark AS result_stripped,
       {texts}
FROM chain c
JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
JOIN blocks u ON u.file_id = c.file_id AND u.offset = c.offset AND u.kind = 'tool_use'
-- its result on the chain, found through the (file_id, tool_use_id) index
LEFT JOIN blocks t ON t.file_id = u.file_id AND t.tool_use_id = u.tool_use_id AND t.kind = 'tool_result'
     AND EXISTS (SELECT 1 FROM chain x WHERE x.file_id = t.file_id AND x.offset = t.offset)
LEFT JOIN chain rc ON rc.file_id = t.file_id AND rc.offset = t.offset
LEFT JOIN records rr ON rr.file_id = t.file_id AND rr.offset = t.offset
WHERE c.file_id = :f {extra}
ORDER BY c.pos, u.idx, rc.pos
"""


def _tool_rows(conn, file_id: int, extra: str = "", params: dict | None = None,
               keep_text: bool = False) -> list[dict]:
    marks = _persisted(conn, file_id)
    # The texts only when one call is shown: a listing never holds every result in memory.
    texts = (f"{WHOLE_TEXT.format('u')} AS input_text, {WHOLE_TEXT.format('t')} AS result_text"
             if keep_text else "1 AS no_text")
    out, seen = [], set()
    for r in _rows(conn, _TOOL_CALLS.format(extra=extra, texts=texts),
                   {"f": file_id, "mark": STRIPPED_MARK, **(params or {})}):
        if (r["pos"], r["idx"]) in seen:
            continue  # a second result for the same id on the chain: the first one answers
        seen.add((r["pos"], r["idx"]))
        marker = marks.get((r.pop("result_line"), r.pop("result_idx")))
        r["result_state"] = "persisted" if marker else "stripped" if r.pop("result_stripped") else None
        r["input_stripped"] = bool(r["input_stripped"])
        r["persisted"] = marker
        r["is_error"] = bool(r["is_error"]) if r["is_error"] is not None else None
        r.pop("no_text", None)
        out.append(r)
    return out


def list_tool_calls(conn: sqlite3.Connection, ref: SessionRef) -> dict:
    """Every tool call on the active chain, with its sizes and state."""
    with reading(conn, ref) as (c, file_id):
        return {**_header(c, ref, file_id), "tool_calls": _tool_rows(c, file_id)}


def show_tool_call(conn: sqlite3.Connection, ref: SessionRef, tool_use_id: str, context: int = 0) -> dict:
    """One tool call on the active chain: its input and result in full, and
    ``context`` chain positions before the call and after its result."""
    with reading(conn, ref) as (c, file_id):
        rows = _tool_rows(c, file_id, "AND u.tool_use_id = :id", {"id": tool_use_id}, keep_text=True)
        if not rows:
            off = c.execute("SELECT 1 FROM blocks WHERE file_id = ? AND tool_use_id = ? AND kind = 'tool_use'",
                            (file_id, tool_use_id)).fetchone()
            where = "is not on the active chain" if off else "is not in"
            raise NoSuchTarget(f"tool call {tool_use_id!r} {where} {ref.path}"
                               + ("" if off else " (`txdb show-tool SESSION --list` lists them)"))
        call = rows[0]
        last = call["result_pos"] if call["result_pos"] is not None else call["pos"]
        targets = {call["pos"], call["result_pos"]}
        return {**_header(c, ref, file_id), "tool_call": call,
                "context": context_rows(c, file_id, call["pos"] - context, last + context, targets)}


# -- thinking ------------------------------------------------------------------

_THINKING = """
SELECT c.pos, r.line, r.uuid, b.idx,
       CASE WHEN b.kind = 'thinking' AND b.type = 'text' THEN 'wrapped'
            WHEN b.kind = 'thinking' THEN b.type ELSE 'persisted' END AS type,
       b.chars, b.signature_chars, b.chars + b.signature_chars AS total_chars, b.tokens,
       {texts}, b.kind
FROM chain c
JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
JOIN blocks b ON b.file_id = c.file_id AND b.offset = c.offset
WHERE c.file_id = :f AND (b.kind = 'thinking' OR (b.kind = 'text' AND b.text LIKE '%<persisted-thinking>%')) {extra}
ORDER BY c.pos, b.idx
"""


def _thinking_rows(conn, file_id: int, extra: str = "", params: dict | None = None,
                   keep_text: bool = False) -> list[dict]:
    marks = _persisted(conn, file_id)
    out = []
    texts = "b.text" if keep_text else "1 AS no_text"
    for r in _rows(conn, _THINKING.format(extra=extra, texts=texts), {"f": file_id, **(params or {})}):
        marker = marks.get((r["line"], r["idx"]))
        if r.pop("kind") != "thinking" and not (marker and marker["kind"] == "thinking"):
            continue  # a text block that only mentions the tag
        r["persisted"] = marker
        r.pop("no_text", None)
        out.append(r)
    out += _saved_thinking_rows(conn, file_id, marks, extra, params, keep_text)
    out.sort(key=lambda r: (r["pos"], r["idx"] < 0, abs(r["idx"])))
    return out


_SAVED_THINKING = """
SELECT c.pos, r.line, r.uuid, p.block AS idx, 'saved' AS type, p.original_chars AS chars, 0 AS signature_chars,
       p.original_chars AS total_chars, 0 AS tokens, {texts}
FROM persisted p
JOIN chain c ON c.file_id = p.file_id AND c.pos = p.pos
JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
WHERE p.file_id = :f AND p.block < 0 AND p.kind = 'thinking' {extra}
"""


def _saved_thinking_rows(conn, file_id: int, marks: dict, extra: str, params: dict | None,
                         keep_text: bool) -> list[dict]:
    """The thinking the API dropped after an edit, saved to sidecars: a marker
    each in its record's ``persistedThinking`` (block -1 - n; it costs no
    context: the CLI never sends it)."""
    texts = "NULL AS text" if keep_text else "1 AS no_text"
    rows = _rows(conn, _SAVED_THINKING.format(extra=extra, texts=texts),
                 {"f": file_id, **(params or {})})
    for r in rows:
        r["persisted"] = marks.get((r["line"], r["idx"]))
        r.pop("no_text", None)
    return rows


def list_thinking(conn: sqlite3.Connection, ref: SessionRef) -> dict:
    """Every thinking block on the active chain (real, redacted, or a text
    block that is one ``<thinking>`` span), and the persisted ones."""
    with reading(conn, ref) as (c, file_id):
        return {**_header(c, ref, file_id), "thinking": _thinking_rows(c, file_id)}


def show_thinking_at(conn: sqlite3.Connection, ref: SessionRef, pos: int, context: int = 0) -> dict:
    """The thinking block(s) at chain position ``pos`` in full, with
    ``context`` positions either side."""
    with reading(conn, ref) as (c, file_id):
        end = _chain_end(c, file_id)
        if end is None or pos < 0 or pos > end:
            span = f"positions 0..{end}" if end is not None else "it has no active chain"
            raise NoSuchTarget(f"position {pos} is not on the active chain of {ref.path} ({span})")
        blocks = _thinking_rows(c, file_id, "AND c.pos = :pos", {"pos": pos}, keep_text=True)
        if not blocks:
            near = [r["pos"] for r in _thinking_rows(c, file_id)]
            hint = (f"thinking at positions {', '.join(map(str, near[:10]))}" + (", ..." if len(near) > 10 else "")
                    if near else "the chain has no thinking block")
            raise NoSuchTarget(f"no thinking block at position {pos} of {ref.path} ({hint})")
        return {**_header(c, ref, file_id), "pos": pos, "blocks": blocks,
                "context": context_rows(c, file_id, pos - context, pos + context, {pos})}


# -- context -------------------------------------------------------------------

def excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    """A block's text on one line, cut to ``limit`` characters."""
    flat = _SPACE.sub(" ", text or "").strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def context_rows(conn, file_id: int, lo: int, hi: int, targets: set | None = None) -> list[dict]:
    """Chain positions lo..hi: role, the kinds of its blocks, a short excerpt."""
    rows = _rows(conn, """
        SELECT c.pos, r.line, r.type, r.subtype, coalesce(r.role, r.type) AS role,
               (SELECT group_concat(kind, ',') FROM (SELECT b.kind FROM blocks b
                 WHERE b.file_id = r.file_id AND b.offset = r.offset ORDER BY b.idx)) AS kinds,
               (SELECT CASE WHEN b.kind = 'tool_use' THEN b.tool_name || ' ' || b.text ELSE b.text END
                  FROM blocks b WHERE b.file_id = r.file_id AND b.offset = r.offset
                   AND b.text IS NOT NULL AND b.text != '' ORDER BY b.idx LIMIT 1) AS first_text
        FROM chain c JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
        WHERE c.file_id = ? AND c.pos BETWEEN ? AND ? ORDER BY c.pos
    """, (file_id, max(lo, 0), hi))
    for r in rows:
        r["kinds"] = r["kinds"] or r["subtype"] or r["type"]
        r["excerpt"] = excerpt(r.pop("first_text"))
        r["target"] = r["pos"] in (targets or ())
        r.pop("subtype")
    return rows
