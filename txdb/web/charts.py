"""The figures behind txdb's charts, read from a catalog (plain SQL over the
views, and the chain rules of txdb.model.chain). Drawn by txdb.web.svg.

Tokens as the API recorded them, and their cost in USD (usage_by_day's
cost_usd: the price library's prices, txdb.catalog.cost).
"""

from __future__ import annotations

from txdb.catalog import chain_rows
from txdb.catalog.sqlutil import rows as _rows

CONTEXT_LIMIT = 200_000   # a session's window when context_gauge has none for it (no assistant turn)
TOKEN_KINDS = (           # usage_by_day's columns, in the order they are drawn
    ("input_tokens", "input"),
    ("output_tokens", "output"),
    ("cache_read_input_tokens", "cache read"),
    ("cache_creation_input_tokens", "cache creation"),
)
# The rows of the by-day chart: the token kinds, then the cost (in USD).
DAY_ROWS = (*TOKEN_KINDS, ("cost_usd", "cost (USD)", "usd"))


def tokens_by_day(conn) -> list[dict]:
    """One row per day (UTC, oldest first): input, output, cache read and
    cache creation tokens the API recorded, all models together, and their
    cost in USD (NULL: nothing of that day is priced)."""
    sums = ", ".join(f"sum({col}) AS {col}" for col, _ in TOKEN_KINDS)
    return _rows(conn, f"SELECT day, {sums}, sum(api_messages) AS api_messages, "
                       f"round(sum(cost_usd), 6) AS cost_usd, sum(unpriced_messages) AS unpriced_messages "
                       f"FROM usage_by_day WHERE day <> '' GROUP BY day ORDER BY day")


def largest_contexts(conn, limit: int = 20) -> list[dict]:
    """The sessions whose active chain sends the most context on --resume,
    fullest first (sessions_by_context's estimate, beside the recorded gauge),
    each with its own window (context_gauge.window_tokens, as `txdb sessions` judges it)."""
    return _rows(conn, """
        SELECT x.*, coalesce((SELECT g.window_tokens FROM context_gauge g WHERE g.file_id = x.file_id), ?)
                    AS window_tokens
        FROM (SELECT file_id, session_id, title, kind, est_context_tokens, gauge_tokens
              FROM sessions_by_context ORDER BY est_context_tokens DESC, file_id LIMIT ?) x
        ORDER BY x.est_context_tokens DESC, x.file_id""", (CONTEXT_LIMIT, limit))


def context_over_chain(conn, file_id: int) -> dict:
    """How a session's context grew, turn by turn, and where it was compacted.

    The history is ``chain_rows.compacted_history`` (:func:`_history`): the active chain preceded by
    the chains compactions left behind, in file order. Each assistant message
    on it is one point: the context the API recorded for that turn by the
    gauge's rule (``usage_context.api_gauge``: the last ``iterations[]``
    entry when there is one; the usage row's own figures, which a usage
    reset leaves alone). It ends at the gauge: when a surgery lowered the
    last turn's figures (``context_gauge.gauge_tokens``, what the page's
    gauge and Claude Code on resume read), one more point, ``now``, after
    the last turn: the context as it stands since, not a recorded turn.
    """
    history, boundaries = _history(conn, file_id)
    usage = {r["message_id"]: r for r in _rows(
        conn, "SELECT message_id, timestamp, api_gauge AS context FROM usage_context WHERE file_id = ?",
        (file_id,))}
    points: list[dict] = []
    for offset, rtype, mid, _ts in history:
        if rtype == "assistant" and mid in usage:
            u = usage.pop(mid)  # one point per API message (its first line)
            points.append({"turn": len(points) + 1, "offset": offset, "message_id": mid,
                           "timestamp": u["timestamp"], "context": u["context"]})
    compactions = [{"after_turn": sum(1 for p in points if p["offset"] < offset), "offset": offset,
                    "timestamp": ts}
                   for offset, _t, _m, ts in history if offset in boundaries]
    gauge = conn.execute("SELECT message_id, gauge_tokens, window_tokens FROM context_gauge WHERE file_id = ?",
                         (file_id,)).fetchone()
    if points and gauge and gauge[0] == points[-1]["message_id"] and gauge[1] != points[-1]["context"]:
        at = conn.execute("SELECT max(at) FROM surgeries WHERE file_id = ?", (file_id,)).fetchone()[0]
        points.append({"turn": len(points) + 1, "offset": None, "message_id": None, "timestamp": at,
                       "context": gauge[1], "now": True})
    return {"points": points, "compactions": compactions, "limit": gauge[2] if gauge else CONTEXT_LIMIT}


def _history(conn, file_id: int) -> tuple[list[tuple], dict[int, str | None]]:
    """``(offset, type, message_id, timestamp)`` of ``chain_rows.compacted_history``'s
    nodes, and the boundaries. A chain that does not start at a compact
    boundary has no earlier segment: its history is the stored chain
    (refresh's ``active_chain``), read without rebuilding every node."""
    boundaries = chain_rows.compact_boundaries(conn, file_id)
    first = conn.execute("SELECT offset FROM chain WHERE file_id = ? AND pos = 0", (file_id,)).fetchone()
    if first is not None and first[0] not in boundaries:
        rows = conn.execute(
            "SELECT r.offset, r.type, CASE WHEN r.type = 'assistant' THEN r.message_id END, r.timestamp "
            "FROM chain c JOIN records r ON r.file_id = c.file_id AND r.offset = c.offset "
            "WHERE c.file_id = ? ORDER BY r.offset", (file_id,)).fetchall()
        return rows, boundaries
    nodes, boundaries = chain_rows.compacted_history(conn, file_id)
    return [(n.offset, n.type, n.message_id, n.timestamp) for n in nodes], boundaries
