"""What the session page shows, read from a catalog in one go (plain SQL
over the tables and views; the context chart from ``charts``). Rendered by
the plugin's session route (``txdb.web.plugin``).
"""

from __future__ import annotations

import json

from txdb.catalog.sessions import session_matches
from txdb.catalog.sqlutil import rows as _rows
from txdb.catalog.estimate import FITTED, catalog_breakdown
from txdb.model import deep
from txdb.catalog.ingest.chunks import raw_at
from txdb.web import charts
from txdb.web.markdown import preformatted, render as markdown
from txdb.web.urls import page_ref

PAGE_RECORDS = 100           # chain records per session page (a first screen; the pager reaches the rest)
TEXT_CHARS = 12_000          # text / thinking shown per block on the session page
TOOL_CHARS = 2_000           # tool input / output shown per block on the session page
META_OPEN_CHARS = 600        # longer text in a meta record (a skill's body, injected context) is collapsed
OUTPUT_OPEN_CHARS = 800      # a Bash command's output up to this size is shown open, below it
OUTPUT_OPEN_LINES = 20


def _tool_summary(name: str | None, text: str | None) -> str:
    """A one-line gist of a tool call's input (the command, the path, ...)."""
    if not text:
        return ""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return text[:120]
    if not isinstance(data, dict):
        return text[:120]
    for key in ("command", "file_path", "path", "pattern", "url", "query", "description", "prompt",
                "skill", "subject"):
        v = data.get(key)
        if isinstance(v, str) and v:
            v = " ".join(v.split())
            return v[:160] + ("…" if len(v) > 160 else "")
    return ", ".join(sorted(data))[:160]


SQLITE_MAX_INT = 2**63 - 1


def find_session(conn, ref: str) -> tuple[int | None, list[dict]]:
    """The session file a page's ``ref`` names: its id, a prefix of it (as
    the CLI takes them: ``catalog.session_matches``), or digits naming
    ``files.id`` (the older form, tried first). Gives (file_id, []) for one
    file, (None, the candidates) for several, (None, []) for none."""
    if ref.isdigit() and len(ref.lstrip("0")) <= 19 and int(ref) <= SQLITE_MAX_INT:
        if conn.execute("SELECT 1 FROM sessions WHERE file_id = ?", (int(ref),)).fetchone():
            return int(ref), []
    found = {r[0]: r[1] for r in session_matches(conn, ref)}
    if len(found) == 1:
        return next(iter(found)), []
    marks = ",".join("?" * len(found))
    rows = _rows(conn, f"""
        SELECT s.file_id, s.session_id, s.title, s.project, s.last_timestamp, s.parent_session_id, f.path
        FROM sessions s JOIN files f ON f.id = s.file_id WHERE s.file_id IN ({marks})
        ORDER BY s.last_timestamp DESC""", list(found))
    for r in rows:
        r["ref"] = page_ref(conn, r["path"], r["file_id"])
    return None, rows


def load_session(conn, file_id: int, start: int, limit: int) -> dict | None:
    """Everything the session page shows, read in one go (plain SQL)."""
    head = _rows(conn, """
        SELECT s.*, f.path, f.size AS file_bytes, f.kind, f.gone
        FROM sessions s JOIN files f ON f.id = s.file_id WHERE s.file_id = ?""", (file_id,))
    if not head:
        return None
    session = head[0]
    # The gauge and the calibrated estimate as every view shows them.
    gauge = _rows(conn, "SELECT gauge_tokens, est_context_tokens, raw_context_tokens, cost_usd, unpriced_messages "
                        "FROM session_costs WHERE file_id = ?", (file_id,))
    session["gauge_tokens"] = gauge[0]["gauge_tokens"] if gauge else None
    window = conn.execute("SELECT window_tokens FROM context_gauge WHERE file_id = ?", (file_id,)).fetchone()
    session["window_tokens"] = window[0] if window else 200_000  # the view's rule, for the gauge's percentage
    # What its API messages cost (billed_cost), and the CLI's own figure.
    session["cost_usd"] = gauge[0]["cost_usd"] if gauge else None
    session["unpriced_messages"] = gauge[0]["unpriced_messages"] if gauge else None
    cli = conn.execute("SELECT cli_cost_usd FROM cli_cost WHERE file_id = ?", (file_id,)).fetchone()
    session["cli_cost_usd"] = cli[0] if cli else None
    by_type = _rows(conn, """
        SELECT category, items, chars, tokens FROM analyze_by_type WHERE file_id = ?
        ORDER BY tokens DESC""", (file_id,))
    by_tool = _rows(conn, """
        SELECT tool_name, calls, errors, input_tokens, result_tokens, tokens FROM analyze_by_tool
        WHERE file_id = ? ORDER BY tokens DESC LIMIT 12""", (file_id,))
    est = sum(r["tokens"] or 0 for r in by_type)  # the raw breakdown's total
    session["est_context_tokens"] = gauge[0]["est_context_tokens"] if gauge else est
    session["raw_context_tokens"] = gauge[0]["raw_context_tokens"] if gauge else est
    total = session["chain_length"] or 0
    before = conn.execute(
        "SELECT coalesce(sum(r.tokens), 0) FROM chain c JOIN records r ON r.file_id = c.file_id "
        "AND r.offset = c.offset WHERE c.file_id = ? AND c.pos < ?", (file_id, start)).fetchone()[0]
    records = _rows(conn, """
        SELECT c.pos, r.offset, r.line, r.length, r.type, r.subtype, r.role, r.uuid, r.timestamp,
               r.model, r.is_meta, r.is_sidechain, r.tokens,
               a.type AS attachment_type, a.policy, a.free
        FROM chain c
        JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset
        LEFT JOIN attachments a ON a.file_id = r.file_id AND a.offset = r.offset
        WHERE c.file_id = ? AND c.pos >= ? AND c.pos < ?
        ORDER BY c.pos""", (file_id, start, start + limit))
    raws = raw_at(conn, file_id, (r["offset"] for r in records if r["type"] not in ("user", "assistant")))
    for r in records:
        raw = raws.get(r["offset"]) if r["type"] not in ("user", "assistant") else None
        body = None if raw is None else _body(raw)
        r["body"] = None if body is None else body[:TOOL_CHARS + 1]
    blocks = _rows(conn, """
        SELECT b.offset, b.idx, b.kind, b.type, b.tool_name, b.tool_use_id, b.is_error, b.chars,
               b.signature_chars, b.tokens, b.media_type, b.width, b.height, b.images, b.cut,
               substr(b.text, 1, CASE WHEN b.kind IN ('text', 'thinking', 'command', 'caveat')
                                      THEN ? ELSE ? END) AS text
        FROM chain c JOIN blocks b ON b.file_id = c.file_id AND b.offset = c.offset
        WHERE c.file_id = ? AND c.pos >= ? AND c.pos < ?
        ORDER BY c.pos, b.idx""", (TEXT_CHARS + 1, TOOL_CHARS + 1, file_id, start, start + limit))
    _whole_texts(conn, file_id, blocks)
    by_offset: dict[int, list] = {}
    for b in blocks:
        text = b["text"] or ""
        cap = TEXT_CHARS if b["kind"] in ("text", "thinking", "command", "caveat") else TOOL_CHARS
        b["truncated"] = len(text) > cap or (b["chars"] or 0) > cap
        b["text"] = text[:cap]
        if b["kind"] == "tool_use":
            b["summary"] = _tool_summary(b["tool_name"], text if len(text) <= cap else None) or (
                text[:120] if text else "")
        by_offset.setdefault(b["offset"], []).append(b)
    _inline_bash(blocks)
    for b in blocks:
        if b["kind"] == "text":
            b["html"] = markdown(b["text"])
        elif b["kind"] == "tool_result":
            b["html"] = preformatted(b["text"] or "")
    max_tokens = max([r["tokens"] or 0 for r in records] + [1])
    running = before
    for r in records:
        running += r["tokens"] or 0
        r["cumulative"] = running
        r["bar"] = round(100 * (r["tokens"] or 0) / max_tokens, 1)
        r["blocks"] = by_offset.get(r["offset"], [])
        body = r.pop("body")
        r["body_truncated"] = bool(body) and len(body) > TOOL_CHARS
        r["body"] = _pretty(body[:TOOL_CHARS]) if body else None
        r["label"] = _label(r)
        for b in r["blocks"]:
            # a skill's body or other injected text: collapsed, its first line as the gist
            b["collapse"] = bool(r["is_meta"]) and b["kind"] == "text" and (b["chars"] or 0) > META_OPEN_CHARS
            if b["collapse"]:
                b["gist"] = next((ln.strip() for ln in b["text"].splitlines() if ln.strip()), "")[:120]
    # The breakdown restated to add up to the headline estimate (estimate.catalog_breakdown).
    if gauge and gauge[0]["est_context_tokens"] is not None and session["est_method"]:
        by_type = catalog_breakdown(conn, file_id, by_type)
    else:
        for t in by_type:
            t["raw_tokens"] = t["tokens"]
    headline = sum(t["tokens"] or 0 for t in by_type)
    max_type = max([t["tokens"] or 0 for t in by_type] + [1])
    for t in by_type:
        t["bar"] = round(100 * (t["tokens"] or 0) / max_type, 1)
        t["pct"] = round(100 * (t["tokens"] or 0) / headline, 1) if headline else 0
        t["fitted"] = t["category"] == FITTED
    max_tool = max([t["tokens"] or 0 for t in by_tool] + [1])
    for t in by_tool:
        t["bar"] = round(100 * (t["tokens"] or 0) / max_tool, 1)
    return {
        "items": _group_attachments(records),
        "breakdown_tokens": headline,
        "file_id": file_id,
        "session": session,
        # the whole history's chart, on the first page only (it reads every chain node)
        "context": charts.context_over_chain(conn, file_id) if start == 0 else None,
        "by_type": by_type,
        "by_tool": by_tool,
        "records": records,
        "start": start,
        "limit": limit,
        "total": total,
        "prev_start": max(0, start - limit) if start > 0 else None,
        "next_start": start + limit if start + limit < total else None,
        "last_start": max(0, total - limit) if start + limit < total else None,
        "text_chars": TEXT_CHARS,
        "tool_chars": TOOL_CHARS,
    }


def _whole_texts(conn, file_id: int, blocks: list[dict]) -> None:
    """The text shown of each cut block (``blocks.text`` holds only its
    start) decoded from its raw line, each chunk once, up to what the page
    shows of it."""
    short = [b for b in blocks if b["cut"] == 1 and (b["chars"] or 0) > len(b["text"] or "")]
    if not short:
        return
    from txdb.catalog.ingest.rows import block_text

    raws = raw_at(conn, file_id, (b["offset"] for b in short))
    for b in short:
        raw = raws.get(b["offset"])
        try:
            whole = block_text(raw, b["idx"]) if raw is not None else None
        except (ValueError, TypeError, RecursionError):  # not one JSON object: the stored start is shown
            whole = None
        if isinstance(whole, str) and whole.startswith(b["text"] or ""):
            cap = TEXT_CHARS if b["kind"] in ("text", "thinking", "command", "caveat") else TOOL_CHARS
            b["text"] = whole[:cap + 1]


def _inline_bash(blocks: list[dict]) -> None:
    """A Bash call shows its command as code with its output below it: the
    result block (same tool_use_id, on this page) moves to its call."""
    results = {b["tool_use_id"]: b for b in blocks if b["kind"] == "tool_result" and b["tool_use_id"]}
    for b in blocks:
        b["command"] = b["result"] = b["shown_with"] = None
    for b in blocks:
        if b["kind"] != "tool_use" or b["tool_name"] != "Bash":
            continue
        command = None
        if not b["truncated"]:
            try:
                data = json.loads(b["text"])
                command = data.get("command") if isinstance(data, dict) else None
            except (ValueError, RecursionError):
                pass
        b["command"] = command if isinstance(command, str) else None
        res = results.get(b["tool_use_id"]) if b["command"] is not None else None
        if res is not None:
            b["result"] = res
            res["shown_with"] = b
            out = res["text"] or ""
            res["open"] = (res["chars"] or 0) <= OUTPUT_OPEN_CHARS and out.count("\n") < OUTPUT_OPEN_LINES


def _group_attachments(records: list[dict]) -> list[dict]:
    """The page's records in order, each run of two or more consecutive
    attachments as one group (its count, kinds and tokens)."""
    items: list[dict] = []
    for r in records:
        if r["type"] == "attachment" and items and items[-1]["kind"] == "attachments":
            items[-1]["records"].append(r)
        elif r["type"] == "attachment":
            items.append({"kind": "attachments", "records": [r]})
        else:
            items.append({"kind": "record", "record": r})
    out = []
    for it in items:
        if it["kind"] == "attachments" and len(it["records"]) == 1:
            out.append({"kind": "record", "record": it["records"][0]})
            continue
        if it["kind"] == "attachments":
            kinds: dict[str, int] = {}
            for r in it["records"]:
                k = r["attachment_type"] or r["subtype"] or "?"
                kinds[k] = kinds.get(k, 0) + 1
            it["kinds"] = ", ".join(f"{k} ×{n}" if n > 1 else k for k, n in kinds.items())
            it["tokens"] = sum(r["tokens"] or 0 for r in it["records"])
            it["first"], it["last"] = it["records"][0]["pos"], it["records"][-1]["pos"]
        out.append(it)
    return out


def _body(raw: bytes) -> str | None:
    """What a line that is not a message shows: its content, its attachment's
    content, its attachment or its summary (JSON as compact text), else a
    line that does not parse as its text."""
    try:
        obj = deep.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")
    if not isinstance(obj, dict):
        return None
    att = obj.get("attachment")
    for v in (obj.get("content"), att.get("content") if isinstance(att, dict) else None, att, obj.get("summary")):
        if v is None:
            continue
        if isinstance(v, str):
            return v
        if isinstance(v, bool):
            return "1" if v else "0"
        if isinstance(v, (int, float)):
            return str(v)
        return deep.dumps_text(v)
    return None


def _pretty(body: str) -> str:
    if body[:1] in "{[":
        try:
            return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to show as a tree
            pass
    return body


def _label(r: dict) -> str:
    if r["type"] == "attachment":
        return f"attachment · {r['attachment_type'] or r['subtype'] or '?'}"
    if r["type"] == "system":
        return f"system · {r['subtype'] or '?'}"
    if r["type"] == "user" and r["blocks"] and all(b["kind"] == "tool_result" for b in r["blocks"]):
        return "tool result"
    if r["is_meta"]:
        return f"{r['role'] or r['type']} · meta"
    return r["role"] or r["type"] or "?"
