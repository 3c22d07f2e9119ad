"""Small server-side SVG charts: no script, no font or file from elsewhere,
so a page that holds them loads nothing beyond itself. Colours and fonts
come from txdb.css (classes), so the SVG stays data only."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
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


# Text widths for laying labels out (12px and 11px sans-serif; generous).
CHAR_W = {"lbl": 7.2, "sub": 6.6}
DATE_LABEL_GAP = 12  # px between two date labels at least


def text_width(text: str, cls: str = "sub") -> float:
    return len(text) * CHAR_W.get(cls, 7.2)


def day_axis(days: list[str], x0: float, width: float) -> tuple[Callable[[str], float], float, list[str]]:
    """A time axis over ``days`` (ISO dates, oldest first): the x of a day
    (the middle of its slot; an idle day keeps its slot, so it shows as a
    gap), the slot's width, and the days to label, spaced so that no two
    labels overlap."""
    first, last = dt.date.fromisoformat(days[0]), dt.date.fromisoformat(days[-1])
    span = (last - first).days + 1
    slot = width / span

    def x(day: str) -> float:
        return x0 + ((dt.date.fromisoformat(day) - first).days + 0.5) * slot

    every = max(1, math.ceil((text_width("2026-01-01") + DATE_LABEL_GAP) / slot))
    ticks = [(first + dt.timedelta(days=i)).isoformat() for i in range(0, span, every)]
    return x, slot, ticks


def tokens_by_day(days: list[dict], kinds) -> str:
    """Small multiples: one row of daily bars per token kind, each on its own
    scale, on a time axis (a day without usage is a gap); a kind given as
    (column, label, "usd") is drawn in dollars."""
    if not days:
        return ""
    left, right, row_h, gap, top = 140, 20, 64, 18, 8
    height = top + len(kinds) * (row_h + gap) + 24
    plot_w = WIDTH - left - right
    x_of, slot, ticks = day_axis([d["day"] for d in days], left, plot_w)
    bar_w = min(40.0, max(1.0, slot * 0.8))
    body = []
    for k, (col, label, *unit) in enumerate(kinds):
        dollars = unit == ["usd"]
        y0 = top + k * (row_h + gap)
        peak = max((d[col] or 0) for d in days)
        total = sum((d[col] or 0) for d in days)
        top_v = _nice_max(peak)
        # The row's labels stacked in the left margin: its name, its total, its scale.
        body.append(f'<text class="lbl" x="0" y="{_n(y0 + 14)}">{escape(label)}</text>'
                    f'<text class="sub" x="0" y="{_n(y0 + 30)}">{usd(total) if dollars else f"{total:,}"} in all</text>'
                    f'<text class="sub" x="0" y="{_n(y0 + 46)}">scale: {usd(top_v) if dollars else human(top_v)}</text>'
                    f'<line class="grid" x1="{left}" x2="{WIDTH - right}" y1="{_n(y0)}" y2="{_n(y0)}"/>'
                    f'<line class="axis" x1="{left}" x2="{WIDTH - right}" y1="{_n(y0 + row_h)}" y2="{_n(y0 + row_h)}"/>')
        for d in days:
            v = d[col] or 0
            h = row_h * v / top_v
            x = x_of(d["day"]) - bar_w / 2
            body.append(f'<rect class="c-bar kind-{k}" data-day="{escape(d["day"])}" data-value="{v}" '
                        f'x="{_n(x)}" y="{_n(y0 + row_h - h)}" width="{_n(bar_w)}" height="{_n(h)}">'
                        f'<title>{escape(d["day"])} · {escape(label)}: '
                        + (f'{usd(v)}' + (" (some unpriced)" if d.get("unpriced_messages") else "")
                           if dollars else f'{v:,} tokens') + '</title></rect>')
    for day in ticks:
        x = x_of(day)
        if x + text_width(day) / 2 > WIDTH:  # would be cut at the right edge
            continue
        body.append(f'<line class="axis" x1="{_n(x)}" x2="{_n(x)}" y1="{height - 24}" y2="{height - 19}"/>'
                    f'<text class="sub" x="{_n(x)}" y="{height - 6}" text-anchor="middle">{escape(day)}</text>')
    return _svg(height, "By day: " + ", ".join(k[1] for k in kinds), body)


def largest_contexts(sessions: list[dict], limit: int, link) -> str:
    """Horizontal bars: each session's estimated context, its recorded gauge
    as a tick, and its own context window (``window_tokens``; ``limit`` when
    a row has none) as a dashed mark across its bar."""
    if not sessions:
        return ""
    left, right, bar_h, gap, top = 260, 60, 18, 6, 22
    height = top + len(sessions) * (bar_h + gap) + 10
    plot_w = WIDTH - left - right
    peak = max(max(s["est_context_tokens"] or 0, s["gauge_tokens"] or 0) for s in sessions)
    windows = [s.get("window_tokens") or limit for s in sessions]
    top_v = max(min(windows) * 1.1, peak)
    sx = plot_w / top_v
    body = []
    for i, (s, window) in enumerate(zip(sessions, windows)):
        y = top + i * (bar_h + gap)
        est = s["est_context_tokens"] or 0
        name = s["title"] or s["session_id"] or f"#{s['file_id']}"
        fits = int((left - 12) / CHAR_W["lbl"])  # the label stays in the left margin
        short = name if len(name) <= fits else name[:fits - 1] + "…"
        over = " over" if est > window else ""
        body.append(f'<a href="{escape(link(s["file_id"]))}">'
                    f'<text class="lbl" x="{left - 8}" y="{_n(y + bar_h - 5)}" text-anchor="end">{escape(short)}</text>'
                    f'<rect class="c-bar ctx{over}" data-file-id="{s["file_id"]}" data-value="{est}" x="{left}" '
                    f'y="{_n(y)}" width="{_n(est * sx)}" height="{bar_h}"><title>{escape(name)}: '
                    f'{est:,} tokens estimated'
                    + (f', {s["gauge_tokens"]:,} recorded' if s["gauge_tokens"] is not None else "")
                    + f' of its {window:,} window</title></rect></a>'
                    f'<text class="sub" x="{_n(left + est * sx + 4)}" y="{_n(y + bar_h - 5)}">{human(est)}</text>')
        if s["gauge_tokens"] is not None:
            gx = left + s["gauge_tokens"] * sx
            body.append(f'<line class="gauge" data-value="{s["gauge_tokens"]}" x1="{_n(gx)}" x2="{_n(gx)}" '
                        f'y1="{_n(y - 2)}" y2="{_n(y + bar_h + 2)}"/>')
        if window <= top_v:
            wx = _n(left + window * sx)
            body.append(f'<line class="limit" data-value="{window}" x1="{wx}" x2="{wx}" '
                        f'y1="{_n(y - gap / 2)}" y2="{_n(y + bar_h + gap / 2)}"/>')
    for window in sorted(set(w for w in windows if w <= top_v)):
        lx = left + window * sx
        body.append(f'<text class="limit-lbl" x="{_n(lx)}" y="{top - 9}" text-anchor="middle">'
                    f'{human(window)} context window</text>')
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
    label_end = -1.0  # where the last "compacted" label ends: the next one starts past it or is left out
    for c in compactions:
        cx = x(c["after_turn"] + 0.5) if n > 1 else x(1)
        cx = min(max(cx, left), WIDTH - right)
        body.append(f'<line class="compaction" data-after-turn="{c["after_turn"]}" x1="{_n(cx)}" x2="{_n(cx)}" '
                    f'y1="{top - 10}" y2="{_n(y(0))}"><title>compacted{" at " + escape(c["timestamp"]) if c["timestamp"] else ""}'
                    f'</title></line>')
        w = text_width("compacted")
        anchor = ("end", cx - 3) if cx > WIDTH - right - 80 else ("start", cx + 3)
        begin = anchor[1] - w if anchor[0] == "end" else anchor[1]
        if begin > label_end + 4:
            body.append(f'<text class="compaction-lbl" x="{_n(anchor[1])}" y="{top - 12}" '
                        f'text-anchor="{anchor[0]}">compacted</text>')
            label_end = begin + w
    recorded = [p for p in points if not p.get("now")]
    path = " ".join(f"{_n(x(p['turn']))},{_n(y(p['context']))}" for p in recorded)
    body.append(f'<polyline class="line" points="{path}"/>')
    now = points[-1] if points[-1].get("now") and recorded else None
    if now:  # the gauge since a surgery: dashed from the last recorded turn
        last = recorded[-1]
        body.append(f'<line class="line now" x1="{_n(x(last["turn"]))}" y1="{_n(y(last["context"]))}" '
                    f'x2="{_n(x(now["turn"]))}" y2="{_n(y(now["context"]))}"/>')
    for p in points:
        what = (f'now, the gauge{" since the surgery of " + escape(p["timestamp"]) if p["timestamp"] else ""}'
                if p.get("now") else
                f'turn {p["turn"]}{" · " + escape(p["timestamp"]) if p["timestamp"] else ""}')
        body.append(f'<circle class="pt{" now" if p.get("now") else ""}" data-turn="{p["turn"]}" '
                    f'data-value="{p["context"]}" cx="{_n(x(p["turn"]))}" '
                    f'cy="{_n(y(p["context"]))}" r="{3 if n <= 200 else 1.5}"><title>{what}: '
                    f'{p["context"]:,} tokens</title></circle>')
    body.append(f'<text class="sub" x="{left}" y="{height - 8}">turn 1</text>'
                f'<text class="sub" x="{WIDTH - right}" y="{height - 8}" text-anchor="end">'
                f'{"now" if now else f"turn {n}"}</text>')
    return _svg(height, "Context over the chain: recorded per assistant turn, compactions marked", body)
