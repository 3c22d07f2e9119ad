"""The figures of the catalog's front page (its Datasette database page),
read from the views: totals and cost over the last seven days and in all
(usage_by_day), the sessions near their context window
(sessions_near_limit), the largest and the most recent sessions
(sessions_by_size) with their cost (session_usage). Rules stay in the
views; this only picks rows."""

from __future__ import annotations

from txdb.catalog.sqlutil import rows as _rows

ROWS = 8  # rows in each of the page's lists

# The search box's views (sql/views/7ab..7e), by the label of their button.
SEARCHES = (
    ("search_blocks", "Everything"),
    ("search_messages", "Messages"),
    ("search_thinking", "Thinking"),
    ("search_tool_output", "Tool output"),
)

# The last seven days and the whole catalog, in one pass over usage_by_day.
_SUMS = ("count(DISTINCT {w}) AS days, sum({v}api_messages) AS api_messages, sum({v}total_tokens) AS total_tokens, "
         "round(sum({v}cost_usd), 2) AS cost_usd, sum({v}unpriced_messages) AS unpriced_messages, "
         "min({w}) AS first_day, max({w}) AS last_day")
_TOTALS = ("SELECT " + _SUMS.format(w="CASE WHEN day >= :since THEN day END",
                                    v="CASE WHEN day >= :since THEN 1 END * ").replace(" AS ", " AS week_")
           + ", " + _SUMS.format(w="day", v="") + " FROM usage_by_day")


def load_front(conn, limit: int = ROWS) -> dict:
    """Everything the front page shows, each figure from its view."""
    week = conn.execute("SELECT date('now', '-6 days')").fetchone()[0]
    sessions = conn.execute(
        "SELECT count(*), coalesce(sum(size), 0) FROM files WHERE kind = 'session' AND gone = 0").fetchone()
    totals = _rows(conn, _TOTALS, {"since": week})[0]
    recent = _rows(conn, """
        SELECT conversation, file_id, session_id, project, title, file_bytes, gauge_tokens, last_timestamp
        FROM sessions_by_size WHERE kind = 'session' AND gone = 0
        ORDER BY last_timestamp DESC, file_id DESC LIMIT ?""", (limit,))
    largest = _rows(conn, """
        SELECT conversation, file_id, session_id, project, title, file_bytes, gauge_tokens, last_timestamp
        FROM sessions_by_size WHERE kind = 'session' AND gone = 0 LIMIT ?""", (limit,))
    _add_cost(conn, recent + largest)
    return {
        "since": week,
        "week": {k[5:]: v for k, v in totals.items() if k.startswith("week_")},
        "all": {k: v for k, v in totals.items() if not k.startswith("week_")},
        "sessions": sessions[0],
        "session_bytes": sessions[1],
        "near_limit": _rows(conn, """
            SELECT conversation, file_id, session_id, project, title, model, gauge_tokens, window_tokens,
                   pct_of_window, status, last_timestamp
            FROM sessions_near_limit WHERE status <> 'ok' LIMIT ?""", (limit,)),
        "largest": largest,
        "recent": recent,
        "searches": SEARCHES,
    }


def human_bytes(n: int | None) -> str:
    """A size as a reader takes it in (``101.3 MB``; 1024-based); the page keeps the exact bytes in a title."""
    n = n or 0
    if n < 1024:
        return f"{n:,} bytes"
    size = float(n)
    for unit in ("KB", "MB", "GB", "TB"):
        size /= 1024
        if size < 1024 or unit == "TB":
            break
    return f"{size:.1f} {unit}"


def _add_cost(conn, sessions: list[dict]) -> None:
    """Each session's cost (session_costs.cost_usd: its subagents' included, as
    `txdb sessions` and the session page show it), read for these files only."""
    ids = sorted({s["file_id"] for s in sessions})
    if not ids:
        return
    marks = ",".join("?" * len(ids))
    cost = {r["file_id"]: r for r in _rows(
        conn, f"SELECT file_id, cost_usd, unpriced_messages FROM session_costs WHERE file_id IN ({marks})", ids)}
    for s in sessions:
        c = cost.get(s["file_id"], {})
        s["cost_usd"] = c.get("cost_usd")
        s["unpriced_messages"] = c.get("unpriced_messages") or 0
