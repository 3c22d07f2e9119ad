"""Small server-side SVG charts: no script, no font or file from elsewhere,
so a page that holds them loads nothing beyond itself. Colours and fonts
come from txdb.css (classes), so the SVG stays data only."""

from __future__ import annotations

from html import escape

WIDTH = 960


def _n(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def human(tokens: float) -> str:
    """1234567 -> '1.2M' (axis labels)."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(tokens) >= div:
            v = tokens / div
            return f"{v:.1f}".rstrip("0").rstrip(".") + unit
    return f"{tokens:.0f}"


def _nice_max(v: float) -> float:
    """The smallest round number (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k) at or above v (an axis end)."""
    if v <= 0:
        return 1
    k = 1
    while k * 10 <= v:
        k *= 10
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * k >= v:
            return m * k
    return 10 * k


def _svg(height: int, label: str, body: list[str]) -> str:
    return (f'<svg class="txdb-chart" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'aria-label="{escape(label)}" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}">'
            f'<title>{escape(label)}</title>' + "".join(body) + "</svg>")


def usd(v: float) -> str:
    """12.3456 -> '$12.35' (cost labels)."""
    return f"${v:,.2f}"


def tokens_by_day(days: list[dict], kinds) -> str:
    """Small multiples: one row of daily bars per token kind, each on its own
    scale; a kind given as (column, label, "usd") is drawn in dollars."""
    if not days:
        return ""
    left, right, row_h, gap, top = 120, 20, 64, 18, 8
    height = top + len(kinds) * (row_h + gap) + 24
    plot_w = WIDTH - left - right
    step = plot_w / len(days)
    bar_w = min(40.0, max(1.0, step * 0.8))
    body = []
    for k, (col, label, *unit) in enumerate(kinds):
        dollars = unit == ["usd"]
        fmt = usd if dollars else human
        y0 = top + k * (row_h + gap)
        peak = max((d[col] or 0) for d in days)
        total = sum((d[col] or 0) for d in days)
        top_v = _nice_max(peak)
        body.append(f'<text class="lbl" x="0" y="{_n(y0 + 14)}">{escape(label)}</text>'
                    f'<text class="sub" x="0" y="{_n(y0 + 30)}">{fmt(total)} in all</text>'
                    f'<text class="sub" x="{left - 6}" y="{_n(y0 + 10)}" text-anchor="end">{fmt(top_v)}</text>'
                    f'<line class="axis" x1="{left}" x2="{WIDTH - right}" y1="{_n(y0 + row_h)}" y2="{_n(y0 + row_h)}"/>')
        for i, d in enumerate(days):
            v = d[col] or 0
            h = row_h * v / top_v
            x = left + i * step + (step - bar_w) / 2
            body.append(f'<rect class="c-bar kind-{k}" data-day="{escape(d["day"])}" data-value="{v}" '
                        f'x="{_n(x)}" y="{_n(y0 + row_h - h)}" width="{_n(bar_w)}" height="{_n(h)}">'
                        f'<title>{escape(d["day"])} · {escape(label)}: '
                        + (f'{usd(v)}' + (" (some unpriced)" if d.get("unpriced_messages") else "")
                           if dollars else f'{v:,} tokens') + '</title></rect>')
    ticks = sorted({0, len(days) - 1, *range(0, len(days), max(1, len(days) // 8))})
    for i in ticks:
        x = left + i * step + step / 2
        body.append(f'<text class="sub" x="{_n(x)}" y="{height - 6}" text-anchor="middle">'
                    f'{escape(days[i]["day"])}</text>')
    return _svg(height, "By day: " + ", ".join(k[1] for k in kinds), body)


def largest_contexts(sessions: list[dict], limit: int, link) -> str:
    """Horizontal bars: each session's estimated context, its recorded gauge
    as a tick, and the context window as a dashed line."""
    if not sessions:
        return ""
    left, right, bar_h, gap, top = 260, 60, 18, 6, 22
    height = top + len(sessions) * (bar_h + gap) + 10
    plot_w = WIDTH - left - right
    peak = max(max(s["est_context_tokens"] or 0, s["gauge_tokens"] or 0) for s in sessions)
    top_v = max(limit * 1.1, peak)
    sx = plot_w / top_v
    body = []
    for i, s in enumerate(sessions):
        y = top + i * (bar_h + gap)
        est = s["est_context_tokens"] or 0
        name = s["title"] or s["session_id"] or f"#{s['file_id']}"
        short = name if len(name) <= 38 else name[:37] + "…"
        over = " over" if est > limit else ""
        body.append(f'<a href="{escape(link(s["file_id"]))}">'
                    f'<text class="lbl" x="{left - 8}" y="{_n(y + bar_h - 5)}" text-anchor="end">{escape(short)}</text>'
                    f'<rect class="c-bar ctx{over}" data-file-id="{s["file_id"]}" data-value="{est}" x="{left}" '
                    f'y="{_n(y)}" width="{_n(est * sx)}" height="{bar_h}"><title>{escape(name)}: '
                    f'{est:,} tokens estimated'
                    + (f', {s["gauge_tokens"]:,} recorded' if s["gauge_tokens"] is not None else "")
                    + '</title></rect></a>'
                    f'<text class="sub" x="{_n(left + est * sx + 4)}" y="{_n(y + bar_h - 5)}">{human(est)}</text>')
        if s["gauge_tokens"] is not None:
            gx = left + s["gauge_tokens"] * sx
            body.append(f'<line class="gauge" data-value="{s["gauge_tokens"]}" x1="{_n(gx)}" x2="{_n(gx)}" '
                        f'y1="{_n(y - 2)}" y2="{_n(y + bar_h + 2)}"/>')
    lx = left + limit * sx
    body.append(f'<line class="limit" x1="{_n(lx)}" x2="{_n(lx)}" y1="{top - 6}" y2="{height - 4}"/>'
                f'<text class="limit-lbl" x="{_n(lx)}" y="{top - 9}" text-anchor="middle">{human(limit)} context window</text>')
    return _svg(height, "Largest sessions by context, with the context window", body)


def context_over_chain(data: dict) -> str:
    """A line of the recorded context per assistant turn, compactions marked."""
    points, compactions, limit = data["points"], data["compactions"], data["limit"]
    if not points:
        return ""
    left, right, top, bottom, height = 70, 20, 24, 30, 240
    plot_w, plot_h = WIDTH - left - right, height - top - bottom
    peak = max(p["context"] for p in points)
    # the window's line when the session came anywhere near it; else the data fills the chart
    top_v = _nice_max(max(peak, limit) * 1.05 if peak > limit / 2 else peak * 1.1)
    n = len(points)

    def x(turn: float) -> float:
        return left + (plot_w * (turn - 1) / (n - 1) if n > 1 else plot_w / 2)

    def y(v: float) -> float:
        return top + plot_h - plot_h * v / top_v

    body = [f'<line class="axis" x1="{left}" x2="{WIDTH - right}" y1="{_n(y(0))}" y2="{_n(y(0))}"/>']
    for frac in (0.5, 1.0):
        v = top_v * frac
        body.append(f'<line class="grid" x1="{left}" x2="{WIDTH - right}" y1="{_n(y(v))}" y2="{_n(y(v))}"/>'
                    f'<text class="sub" x="{left - 6}" y="{_n(y(v) + 4)}" text-anchor="end">{human(v)}</text>')
    if limit <= top_v:
        body.append(f'<line class="limit" x1="{left}" x2="{WIDTH - right}" y1="{_n(y(limit))}" y2="{_n(y(limit))}"/>'
                    f'<text class="limit-lbl" x="{WIDTH - right}" y="{_n(y(limit) - 4)}" text-anchor="end">'
                    f'{human(limit)} context window</text>')
    for c in compactions:
        cx = x(c["after_turn"] + 0.5) if n > 1 else x(1)
        cx = min(max(cx, left), WIDTH - right)
        body.append(f'<line class="compaction" data-after-turn="{c["after_turn"]}" x1="{_n(cx)}" x2="{_n(cx)}" '
                    f'y1="{top - 10}" y2="{_n(y(0))}"><title>compacted{" at " + escape(c["timestamp"]) if c["timestamp"] else ""}'
                    f'</title></line>')
        anchor = ("end", cx - 3) if cx > WIDTH - right - 80 else ("start", cx + 3)
        body.append(f'<text class="compaction-lbl" x="{_n(anchor[1])}" y="{top - 12}" '
                    f'text-anchor="{anchor[0]}">compacted</text>')
    path = " ".join(f"{_n(x(p['turn']))},{_n(y(p['context']))}" for p in points)
    body.append(f'<polyline class="line" points="{path}"/>')
    for p in points:
        body.append(f'<circle class="pt" data-turn="{p["turn"]}" data-value="{p["context"]}" cx="{_n(x(p["turn"]))}" '
                    f'cy="{_n(y(p["context"]))}" r="{3 if n <= 200 else 1.5}"><title>turn {p["turn"]}'
                    f'{" · " + escape(p["timestamp"]) if p["timestamp"] else ""}: {p["context"]:,} tokens</title></circle>')
    body.append(f'<text class="sub" x="{left}" y="{height - 8}">turn 1</text>'
                f'<text class="sub" x="{WIDTH - right}" y="{height - 8}" text-anchor="end">turn {n}</text>')
    return _svg(height, "Context over the chain: recorded per assistant turn, compactions marked", body)
