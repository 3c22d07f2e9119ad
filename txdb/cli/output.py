"""What the CLI prints: text made terminal-safe, JSON, tables, CSV."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys

import click


# Control characters: every C0 (newline, carriage return and tab too), DEL,
# and C1 (0x9b alone starts a sequence on some terminals), shown as \xNN; and
# the bidirectional controls (a right-to-left override makes a name read
# backwards), shown as \uNNNN.
_BIDI = "\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
# The same but newline and tab: what text of several lines keeps.
_CONTROL_IN_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")


def _escape(pattern: re.Pattern, text):
    if not isinstance(text, str) or not pattern.search(text):
        return text
    return pattern.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                       text)


def terminal_safe(text: str) -> str:
    """``text`` with every control character shown as ``\\xNN``, newline,
    carriage return and tab included: a session title holding ESC ] 8 (a
    link) or ESC [ 2 J (clear screen) prints as inert text, and a file name
    holding a newline stays on its line. For a value set into a line (a
    path, a title, a table cell, an error message)."""
    return _escape(_CONTROL, text)


def lines_safe(text: str) -> str:
    """``terminal_safe`` but for the newlines and tabs of text txdb laid out
    in lines itself (``echo``, a CSV cell's own lines): the values set into
    it go through ``terminal_safe`` first."""
    return _escape(_CONTROL_IN_LINES, text)


def echo(message="", err: bool = False, nl: bool = True) -> None:
    """click.echo of text made terminal-safe (``lines_safe``: a message of
    several lines keeps them; JSON needs nothing: orjson escapes control characters)."""
    click.echo(lines_safe(str(message)), err=err, nl=nl)


def catalog_warning(done: str, error: str) -> str:
    """The one line of a swap that happened while the catalog could not be written."""
    return f"Warning: {done}; the catalog could not be updated: {error}; the next refresh catches up"


@contextlib.contextmanager
def progress_bar(label: str, enabled: bool, show_pos: bool = False):
    """A ``progress(done, total)`` callback drawing a bar on stderr when
    ``enabled`` and stderr is a terminal; else None (the library takes None)."""
    if not (enabled and sys.stderr.isatty()):
        yield None
        return
    with click.progressbar(length=1, label=label, file=sys.stderr, show_pos=show_pos) as bar:
        def progress(done, total):
            bar.length = max(total, 1)
            bar.update(done - bar.pos)

        yield progress


def to_json(value, indent: bool = True) -> str:
    """JSON text with no raw control character: orjson escapes C0; DEL and C1,
    valid raw in JSON, are escaped here too (\\u007f...), so printing JSON to a
    terminal is as safe as the text outputs and loses nothing."""
    import orjson  # here, not at start-up: `txdb --version` and --help print no JSON

    opts = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        text = orjson.dumps(value, option=opts).decode()
    except TypeError:  # a lone surrogate (a file name's bytes that are not UTF-8): escaped, \udce9
        import json

        text = json.dumps(value, indent=2 if indent else None, separators=None if indent else (",", ":"),
                          default=str)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _JSON_RAW.search(text) else text


_JSON_RAW = re.compile("[\x7f-\x9f]")


def emit_rows(rows: list[dict], fmt: str | None, columns: list[str] | None = None,
              drop: list[str] = (), shrink: list[str] | dict[str, int] | None = None) -> None:
    """``rows`` as ``fmt``; a table fitted to the terminal drops the
    columns in ``drop`` first, in that order, and cuts only those in
    ``shrink`` (default: every text column; a dict gives each its
    narrowest width; ``fit_table``)."""
    if fmt is None:
        fmt = "table" if sys.stdout.isatty() else "json"
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    if fmt == "json":
        echo(to_json(rows))
    elif fmt == "nl":
        for r in rows:
            echo(to_json(r, indent=False))
    elif fmt == "csv":
        # Values made terminal-safe like any text (JSON is the lossless format).
        import csv

        # Lines end with \n, as sqlite-utils' CSV does (not the csv module's
        # \r\n, which `$(...)` in a shell would keep).
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([lines_safe(c) for c in columns])
        for r in rows:
            w.writerow([lines_safe(v) if isinstance(v := r.get(c), str) else v for c in columns])
        click.echo(buf.getvalue(), nl=False)
    else:
        echo(tabulate([[_cell(r.get(c)) for c in columns] for r in rows], headers=columns, drop=drop,
                      shrink=shrink))


def tabulate(rows, headers, width: int | None = None, drop=(), shrink=None):
    """An aligned text table: cells made terminal-safe first (so widths are
    those printed), integers with thousands separators (``613,757``, as every
    figure txdb prints in text; JSON and CSV keep the plain number), columns
    padded by display width (CJK counts 2), fitted to the terminal
    (``fit_table``; ``width`` overrides the terminal's, 0 never fits)."""
    from tabulate import tabulate as _tabulate  # imported when a table is printed

    cells = [[_figure(v) for v in row] for row in rows]
    heads = [terminal_safe(h) for h in headers]
    aligns = _aligns(rows, len(headers))
    width = table_width() if width is None else width
    if width:
        floors = shrink if isinstance(shrink, dict) else dict.fromkeys(shrink or (), MIN_TEXT_WIDTH)
        cells, heads, aligns = fit_table(cells, heads, aligns, width, [headers.index(c) for c in drop if c in headers],
                                         None if shrink is None else
                                         {headers.index(c): w for c, w in floors.items() if c in headers})
    return _tabulate(cells, headers=heads, disable_numparse=True, colalign=aligns)


# A text column is never cut narrower than this (nor than its header).
MIN_TEXT_WIDTH = 8
COLUMN_GAP = 2  # tabulate's "simple" format puts two spaces between columns


def table_width() -> int:
    """The columns a table may take: the terminal's when stdout is one (or
    $COLUMNS says), else 0 (piped text is not cut); 0 too under --wide."""
    import shutil

    ctx = click.get_current_context(silent=True)
    if (ctx is not None and ctx.meta.get("txdb.wide")) or not (sys.stdout.isatty() or os.environ.get("COLUMNS")):
        return 0
    return shutil.get_terminal_size().columns


def fit_table(cells: list[list], headers: list[str], aligns, width: int, drop: list[int] = (),
              shrink: dict[int, int] | None = None):
    """The table cut to ``width`` columns. Columns go first, one at a time
    (those in ``drop``, indexes in that order, then the rightmost) until
    the rest fit with each shrinkable column at its floor (``shrink`` maps
    a column to its floor; default every text column, at
    ``MIN_TEXT_WIDTH``). An id is then cut to its floor, as a prefix with
    no ellipsis (what every command takes); the other shrinkable columns
    share what is left, the narrow ones whole, the wide ones cut alike,
    an ellipsis ending a cut cell. Numbers are never cut."""
    from tabulate import MIN_PADDING  # a header is padded by this much in the simple format

    n = len(headers)
    aligns = list(aligns or ["left"] * n)
    widths = [max([display_width(headers[i]) + MIN_PADDING] +
                  [display_width(str(r[i])) for r in cells if r[i] is not None]) for i in range(n)]
    if sum(widths) + COLUMN_GAP * (n - 1) <= width:
        return cells, headers, aligns
    flexible = set(range(n) if shrink is None else shrink) & {i for i in range(n) if aligns[i] == "left"}
    floor = {i: min(widths[i], max((shrink or {}).get(i, MIN_TEXT_WIDTH), display_width(headers[i]) + MIN_PADDING))
             for i in flexible}
    keep = list(range(n))

    def least():
        return sum(floor.get(i, widths[i]) for i in keep) + COLUMN_GAP * (len(keep) - 1)

    while least() > width and len(keep) > 1:
        keep.remove(next((i for i in drop if i in keep), keep[-1]))
    prefixes = {i for i in keep if i in flexible and headers[i].endswith("_id")}
    for i in prefixes:
        widths[i] = floor[i]
    room = width - COLUMN_GAP * (len(keep) - 1) - sum(widths[i] for i in keep if i not in flexible - prefixes)
    share = sorted((i for i in keep if i in flexible - prefixes), key=lambda i: widths[i])
    for k, i in enumerate(share):  # narrowest first: its width or an even share, leaving the rest their floors
        spare = room - sum(floor[j] for j in share[k + 1:])
        widths[i] = max(floor[i], min(widths[i], room // (len(share) - k), spare))
        room -= widths[i]

    def cut(i, v):
        if i not in flexible or v is None:
            return v
        return str(v)[:widths[i]] if i in prefixes else clip(str(v), widths[i])

    return [[cut(i, r[i]) for i in keep] for r in cells], [headers[i] for i in keep], [aligns[i] for i in keep]


def _figure(v):
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return terminal_safe(v)


def _aligns(rows, n: int):
    """Numbers right-aligned (as tabulate aligns the plain ones), the rest left."""
    numeric = [all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) or r[i] is None
                   for r in rows) and any(r[i] is not None for r in rows) for i in range(n)] if rows else []
    return [("right" if k else "left") for k in numeric] or None


def display_width(text: str) -> int:
    from wcwidth import wcswidth

    w = wcswidth(text)
    return w if w >= 0 else len(text)


def clip(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` display columns, with an ellipsis when cut."""
    if display_width(text) <= width:
        return text
    from wcwidth import wcwidth

    out, used = [], 0
    for ch in text:
        w = max(wcwidth(ch), 0)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "\u2026"


def usd(v) -> str:
    """Dollars as a table prints them: to the cent, a cost under a cent to 4
    significant digits ($0.002353, never $0.00); None is unpriced. JSON keeps
    the full figure."""
    if v is None:
        return "unpriced"
    if 0 < abs(v) < 0.01:
        import math

        return f"${v:.{3 - math.floor(math.log10(abs(v)))}f}"
    return f"${v:,.2f}"


def of_window(pct, window) -> str | None:
    """How full a context window is, as tables print it: ``63.4% of 1M``
    (None when there is no window: a subagent's transcript)."""
    if pct is None or not window:
        return None
    return f"{pct:g}% of " + (f"{window / 1_000_000:g}M" if window >= 1_000_000 else f"{window / 1000:g}k")


def _cell(v):
    if isinstance(v, str):
        return clip(terminal_safe(v), 80)
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    return v


def _set_wide(ctx, param, value):
    ctx.meta["txdb.wide"] = value  # read by table_width, for every table this command prints


wide_option = click.option("--wide", is_flag=True, expose_value=False, callback=_set_wide,
                           help="Tables keep every column whole (default: cut to the terminal's width).")


def format_options(f):
    for opt in reversed([
        wide_option,
        click.option("--table", "fmt", flag_value="table", help="Aligned table (default on a terminal)."),
        click.option("--json", "fmt", flag_value="json", help="JSON array (default when piped)."),
        click.option("--nl", "fmt", flag_value="nl", help="Newline-delimited JSON."),
        click.option("--csv", "fmt", flag_value="csv", help="CSV with a header row."),
    ]):
        f = opt(f)
    return f
