"""`txdb doctor`: what Claude Code's cleanup deletes next, and whether txdb could give it back."""

from __future__ import annotations

import math
import shlex
from decimal import Decimal
from pathlib import Path

import click

from txdb import config
from txdb.cli.main import command, db_option, read_catalog, root_option
from txdb.cli.output import echo, terminal_safe, to_json

SHOWN = 10  # paths named of each list (all of them in --json)


def _days_text(days: float) -> str:
    """'1 day', '2.5 days'; under a day, in hours ('0.99 days' read as a rounding slip)."""
    if 0 < days < 1:
        hours = max(1, round(days * 24))
        return f"{hours} hour{'s' if hours != 1 else ''}"
    return f"{days:g} day{'s' if days != 1 else ''}"


def _js(v: object) -> str:
    """A settings value as Claude Code's JavaScript shows it: a number as
    Number#toString writes it (1e+308, 2.5, Infinity; an integer of 21
    digits or more in exponent form), anything else as before (repr)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return repr(v)
    try:
        x = float(v)
    except OverflowError:
        x = math.inf if v > 0 else -math.inf
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    d = Decimal(repr(abs(x))).normalize()  # the shortest digits that read back as x, as JavaScript's
    t = d.as_tuple()
    digits = "".join(map(str, t.digits))
    exponent = t.exponent if isinstance(t.exponent, int) else 0  # x is finite: always an int
    k, n = len(digits), exponent + len(digits)  # x = 0.digits * 10**n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    return sign + digits[0] + ("." + digits[1:] if k > 1 else "") + f"e{'+' if e >= 0 else '-'}{abs(e)}"


def _days(ctx, param, value):
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise click.BadParameter(f"{value:g} is not a finite number of days of at least 0.")
    return value


def _some(paths: list[str]) -> str:
    return "".join(f"\n    {terminal_safe(p)}" for p in paths[:SHOWN]) + (f"\n    ... and {len(paths) - SHOWN} more"
                                                             if len(paths) > SHOWN else "")


def _cut_text(n: int) -> str:
    """A file whose last line has no newline yet, ``n`` bytes of it written."""
    return f"its last line is unfinished ({n:,} byte{'s' if n != 1 else ''} after the last newline)"


def _held(d: dict) -> str:
    """What the catalog holds of a linked folder (``DoctorReport.linked``): under the link, as last read;
    under its target, catalogued from there."""
    parts = ([f"{d['catalogued']:,} file{'s' if d['catalogued'] != 1 else ''} catalogued under the link, as "
              "last read"] if d["catalogued"] else []) + \
        ([f"{d['catalogued_at_target']:,} under its target, catalogued from there"] if d["catalogued_at_target"] else [])
    return f" ({'; '.join(parts)})" if parts else ""


READ_WHEN_ENDED = "refresh reads it once it ends"


@command("doctor")
@db_option
@root_option
@click.option("--cwd", type=click.Path(file_okay=False), default=".",
              help="The project whose .claude/settings*.json count (default: here).")
@click.option("--within", type=float, callback=_days, default=7, show_default=True,
              help="List the sessions Claude Code deletes within this many days (a finite number, at least 0).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor_cmd(db_path, roots, cwd, within, as_json):
    """Claude Code deletes a transcript at start-up once its mtime is older
    than cleanupPeriodDays (default 30); this names the setting in effect
    and the file it comes from, the sessions due within --within days and
    whether the catalog holds each whole (every byte: `txdb restore` gives
    it back), the session files the catalog lacks or holds out of date (run
    `txdb refresh`; one whose last line has no newline yet is named apart:
    refresh reads that line once it ends), whether txdb's hook runs, and the
    date of the price data.
    With --root DIR/projects, the user's settings are DIR/settings.json.
    With no catalog yet it reports all the same (nothing held) and makes none.

    Example:

    \b
        txdb doctor
        txdb doctor --within 30 --json | jq '.due[] | select(.whole | not) | .path'
    """
    from txdb.catalog.doctor import doctor
    from txdb.errors import NoCatalog

    try:
        conn, _ = read_catalog(db_path)
    except NoCatalog:
        conn = None  # a worried user's first command: report what goes, hold nothing, create nothing
    given = config.projects_roots(roots)
    # the settings of the Claude Code whose projects folder is given (its config dir holds both), as
    # refresh reads the history.jsonl beside it; else the one this shell runs
    named = [r.parent for r in given if r.name == "projects"] if roots else []
    r = doctor(conn, named[0] if named else config.claude_config_dir(), given, Path(cwd).resolve(),
               within_days=within)
    if as_json:
        echo(to_json(r.as_dict()))
        return
    ret = r.retention
    setting = f"cleanupPeriodDays = {_js(ret.days)} ({'Claude Code default' if ret.scope == 'default' else ret.source})"
    if ret.skipped:
        echo(terminal_safe(f"Retention: cleanup skipped: {ret.skipped}; Claude Code deletes no transcript at its "
                           f"next start (once that is fixed, {setting} applies)."))
    elif ret.cutoff is None:
        echo(terminal_safe(f"Retention: {setting}; the cutoff falls before the year 1, so no transcript is old "
                           "enough to go."))
    else:
        echo(terminal_safe(f"Retention: {setting}; transcripts last modified before {ret.cutoff} go at Claude "
                           "Code's next start."))
    for s in ret.found:
        if s.problem:
            echo(terminal_safe(f"  Note: {s.path}: {s.problem}" + (f" ({s.key} = {_js(s.value)})"
                                                                   if s.value is not None else "")))
        elif not s.used:
            echo(terminal_safe(f"  ({s.path} sets {_js(s.value)}, overridden)"))
    # an entry is what goes at one time: a session may be several (an agent file beside it, lone subagents)
    sessions: dict[tuple, bool] = {}
    waiting: dict[tuple, bool] = {}  # not whole only for a last line not ended yet: a refresh now reads no more
    for d in r.due:
        key = (d.project, d.session_id)
        sessions[key] = sessions.get(key, True) and d.whole
        waiting[key] = waiting.get(key, True) and len(d.unfinished) == len(d.not_whole)
    n, whole = len(sessions), sum(sessions.values())
    cut = sum(1 for k, w in sessions.items() if not w and waiting[k])
    entries = "" if len(r.due) == n else f" ({len(r.due)} deletion{'s' if len(r.due) != 1 else ''})"
    if not r.catalog:
        held_whole = "none held (no catalog yet: run `txdb refresh` now)"
    else:
        held_whole = f"{whole} held whole by the catalog" + ("" if whole == n else f", {n - whole} not (" + "; ".join(
            ([] if n - whole == cut else ["run `txdb refresh` now"])
            + ([f"{cut} only for a last line unfinished: {READ_WHEN_ENDED}"] if cut else [])) + ")")
    echo(f"Due within {_days_text(within)}: {n} session{'s' if n != 1 else ''}{entries}, {held_whole}"
         + (":" if r.due else "."))
    for d in sorted(r.due, key=lambda d: d.whole)[:SHOWN]:  # the ones not held first
        when = "at Claude Code's next start" if d.deleted_in_days <= 0 else f"in {_days_text(d.deleted_in_days)}"
        held = ("held whole" if d.whole else f"NOT held whole ({len(d.not_whole)} of {d.files} files"
                + "".join(f"; {Path(u['path']).name}: {_cut_text(u['bytes'])}, {READ_WHEN_ENDED}"
                          for u in d.unfinished) + ")" if r.catalog
                else "NOT held whole (no catalog yet: run `txdb refresh` now)")
        tool = d.tool_results == d.files
        many = d.files != 1
        lone = (f" (tool-results file{'s' if many else ''} {'without' if d.lone else 'older than'} the session "
                f"file, by {'their' if many else 'its'} own mtime)" if tool else
                f" (subagent transcript{'s' if d.files != 1 else ''} without the session file)" if d.lone else
                " (an older release's subagent transcript beside the session file, by its own mtime)"
                if Path(d.path).name != d.session_id + ".jsonl" and Path(d.path).parent.name != "subagents" else "")
        echo(terminal_safe(f"    {d.session_id} {d.project}{lone} {when}: {held}"))
    if len(r.due) > SHOWN:
        echo(f"    ... and {len(r.due) - SHOWN} more (--json lists them all)")
    cannot = (f" ({len(r.cannot_catalogue)} of them cannot be: a name that is not UTF-8, under Unreadable)"
              if r.cannot_catalogue else "")
    if not r.catalog:
        echo(f"Session files: {r.session_files}, none catalogued (no catalog yet: `txdb refresh` reads them).")
    else:
        cut_files = len(r.unfinished)
        echo(f"Session files: {r.session_files}, {len(r.not_catalogued)} not catalogued{cannot}, {len(r.stale)} "
             "changed since the last refresh"
             + (f", {cut_files} catalogued up to a last line unfinished ({READ_WHEN_ENDED})" if cut_files else "")
             + (":" if r.not_catalogued or r.stale or r.unfinished else "."))
    if r.catalog and (r.not_catalogued or r.stale or r.unfinished):
        echo(_some(r.not_catalogued + r.stale + [f"{u['path']}: {_cut_text(u['bytes'])}" for u in r.unfinished])
             .lstrip("\n"))
    if r.linked:
        n = len(r.linked)
        give = next((d["root_to_give"] for d in r.linked if d.get("root_to_give")), None)
        echo(terminal_safe(
            f"Linked folders: {n} not followed (txdb never follows a link): no session under {'it' if n == 1 else 'them'} "
            "is catalogued by this path, counted or checked above. " + (
                f"To catalogue and check {'it' if n == 1 else 'one'}, give the folder holding its target as a "
                f"--root of its own (a projects folder: each folder in it is a project): `txdb refresh --root "
                f"{shlex.quote(give)}`, then `txdb doctor` with the same --root:" if give else
                f"No --root reads {'its target' if n == 1 else 'their targets'} rightly (the root itself, a folder "
                "under or above it, or a file system's root): move the folder back, or give its own projects "
                "folder as --root:")))
        echo(_some([f"{d['path']} -> {d['target']}" + _held(d) for d in r.linked]).lstrip("\n"))
    if r.unreadable:
        echo(f"Unreadable: {len(r.unreadable)}" + _some([f"{u['path']} ({u['error']})" for u in r.unreadable]))
    h = r.hook
    if h.installed:
        echo(f"Hook: installed ({'; '.join(h.how)})." + ("" if r.catalog else " It makes the catalog when a "
             "session next changes, holding that session only: `txdb refresh` catalogues the rest."))
    elif h.how:
        echo(f"Hook: enabled ({'; '.join(h.how)}) but txdb-hook is not on PATH, so it does not run.")
    else:
        echo("Hook: not installed (the catalog is current only after `txdb refresh`; see `txdb plugin`).")
    p = r.prices
    echo(f"Prices: {p['library']} {p['version'] or '(not installed)'}, data of {p['data_date'] or 'unknown date'}.")
    hs = r.history
    if hs is None:
        echo("History: not read (no catalog yet: `txdb refresh` reads history.jsonl).")
        return
    nosid = f" ({hs['without_session']} naming no session)" if hs.get("without_session") else ""
    echo(f"History: {hs['prompts']} prompts{nosid} of {hs['sessions']} session{'s' if hs['sessions'] != 1 else ''} from history.jsonl, "
         f"{hs['gone_before_txdb']} gone before txdb (`txdb history --before-txdb`).")
