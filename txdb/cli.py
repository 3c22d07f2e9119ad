"""The txdb command line: thin commands over the library; the only place
that prints or exits."""

from __future__ import annotations

import csv
import importlib
import io
import os
import re
import sqlite3
import sys

import click
import orjson

from . import catalog, config, db
from .errors import QueryRefused, TxdbError
from .ingest.bulk import refresh_db
from .verify import verify_file


# Commands defined in other modules, imported only when one of them runs
# (or --help lists them): `txdb refresh` need not load the surgery engine.
LAZY_COMMANDS = {
    **dict.fromkeys(
        ("strip-tools", "strip-thinking", "strip-all", "strip-attachments", "reset-usage",
         "fork", "snapshot", "apply"),
        "txdb.cli_surgery",
    ),
    "serve": "txdb.cli_serve",
}


class TxdbGroup(click.Group):
    """Turns library errors into one ``Error: ...`` line and a non-zero exit,
    and loads the modules of lazy commands on first use."""

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def get_command(self, ctx, name):
        if name not in self.commands and name in LAZY_COMMANDS:
            importlib.import_module(LAZY_COMMANDS[name])
        return super().get_command(ctx, name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.ClickException as e:
            e.message = terminal_safe(e.message)  # it may quote a title, a path, an argument
            raise
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            # The reader went away (`txdb query ... | head`): it has what it
            # wanted, so stop quietly with status 0 (which is also what a
            # single large write ending on a closed pipe gives in Python).
            _silence_stdout()
            raise click.exceptions.Exit(0) from None
        except TxdbError as e:
            raise click.ClickException(str(e)) from None
        except sqlite3.Error as e:
            raise click.ClickException(f"SQLite: {e}") from None
        except OSError as e:
            raise click.ClickException(f"{e.strerror or e}: {e.filename or ''}".rstrip(": ")) from None
        except KeyboardInterrupt:
            raise click.exceptions.Exit(130) from None
        except Exception as e:  # never a traceback for a user
            if os.environ.get("TXDB_DEBUG"):
                import traceback

                traceback.print_exc()
            raise click.ClickException(f"unexpected {type(e).__name__}: {e}") from None


def db_option(f):
    return click.option(
        "--db",
        "db_path",
        type=click.Path(dir_okay=False),
        envvar="TXDB_DB",
        help="Catalog database (default: $TXDB_DB, else a per-user data folder; see `txdb path`).",
    )(f)


def root_option(f):
    return click.option(
        "--root",
        "roots",
        multiple=True,
        type=click.Path(file_okay=False),
        help="Projects folder to read (repeatable; default: $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects).",
    )(f)


def _open(db_path):
    path = db_path or config.default_db_path()
    return db.connect(path), path


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the final flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


# Control characters a terminal would act on: C0 but newline and tab, DEL,
# and C1 (0x9b alone starts a sequence on some terminals). Shown as \xNN.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character shown as ``\\xNN``: a session
    title holding ESC ] 8 (a link) or ESC [ 2 J (clear screen) prints as
    inert text. Every line txdb prints as text goes through this."""
    if not isinstance(text, str) or not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def echo(message="", err: bool = False, nl: bool = True) -> None:
    """click.echo of text made terminal-safe (JSON needs nothing: orjson escapes control characters)."""
    click.echo(terminal_safe(str(message)), err=err, nl=nl)


def _json(value, indent: bool = True) -> str:
    """JSON text with no raw control character: orjson escapes C0; DEL and C1,
    valid raw in JSON, are escaped here too (\\u007f...), so printing JSON to a
    terminal is as safe as the text outputs and loses nothing."""
    opts = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    text = orjson.dumps(value, option=opts).decode()
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _JSON_RAW.search(text) else text


_JSON_RAW = re.compile("[\x7f-\x9f]")


def emit_rows(rows: list[dict], fmt: str | None, columns: list[str] | None = None) -> None:
    if fmt is None:
        fmt = "table" if sys.stdout.isatty() else "json"
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    if fmt == "json":
        echo(_json(rows))
    elif fmt == "nl":
        for r in rows:
            echo(_json(r, indent=False))
    elif fmt == "csv":
        # Values made terminal-safe like any text (JSON is the lossless format).
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow([terminal_safe(c) for c in columns])
        for r in rows:
            w.writerow([terminal_safe(r.get(c)) for c in columns])
        click.echo(buf.getvalue(), nl=False)
    else:
        echo(tabulate([[_cell(r.get(c)) for c in columns] for r in rows], headers=columns))


def tabulate(rows, headers):
    """An aligned text table: cells made terminal-safe first (so widths are
    those printed), columns padded by display width (CJK counts 2)."""
    from tabulate import tabulate as _tabulate  # imported when a table is printed

    return _tabulate([[terminal_safe(v) for v in row] for row in rows],
                     headers=[terminal_safe(h) for h in headers])


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


def _cell(v):
    if isinstance(v, str):
        return clip(terminal_safe(v), 80)
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    return v


def format_options(f):
    for opt in reversed([
        click.option("--table", "fmt", flag_value="table", help="Aligned table (default on a terminal)."),
        click.option("--json", "fmt", flag_value="json", help="JSON array (default when piped)."),
        click.option("--nl", "fmt", flag_value="nl", help="Newline-delimited JSON."),
        click.option("--csv", "fmt", flag_value="csv", help="CSV with a header row."),
    ]):
        f = opt(f)
    return f


@click.group(cls=TxdbGroup)
@click.version_option(package_name="txdb")
def cli():
    """txdb: every Claude Code session in SQLite, and safe surgery on them.

    Example:

        txdb refresh && txdb sessions
    """


@cli.command()
@db_option
def path(db_path):
    """Print the path of the catalog database.

    Example:

        sqlite3 "$(txdb path)" ".tables"
    """
    echo(str(db_path or config.default_db_path()))


@cli.command()
@db_option
@root_option
@click.option("--prune", is_flag=True, help="Delete the rows of files that vanished from disk.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def refresh(db_path, roots, prune, as_json):
    """Index every session file, reading only what changed.

    Example:

        txdb refresh
        txdb refresh --root ../shared/corpus/generated --db /tmp/demo.db
    """
    root_paths = config.projects_roots(roots)
    bar = None
    progress = None
    if sys.stderr.isatty() and not as_json:
        bar = click.progressbar(length=1, label="Refreshing", file=sys.stderr, show_pos=False)
        bar.__enter__()

        def progress(done, total):
            bar.length = max(total, 1)
            bar.update(done - bar.pos)

    try:
        stats = refresh_db(db_path or config.default_db_path(), root_paths, prune=prune, progress=progress)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if as_json:
        d = dict(stats.__dict__)
        d["mb_per_s"] = stats.mb_per_s
        echo(_json(d))
        return
    for r in stats.roots_missing:
        echo(f"No sessions folder at {r} (nothing to index; set --root or CLAUDE_CONFIG_DIR).", err=True)
    echo(stats.summary())


@cli.command()
@db_option
@click.argument("sql")
@click.option("-p", "--param", "params", multiple=True, type=(str, str), help="Named parameter: -p name value.")
@format_options
def query(db_path, sql, params, fmt):
    """Run a read-only SQL query against the catalog.

    Example:

        txdb query "select type, count(*) as n from records group by type order by n desc"
    """
    conn, path = _open(db_path)
    conn.close()
    ro = db.connect_readonly(path)
    try:
        columns, values = db.run_query(ro, sql, dict(params))
    except QueryRefused as e:
        raise click.ClickException(f"query refused: {e}") from None
    except TxdbError as e:
        raise click.ClickException(f"query failed: {e}") from None
    emit_rows([dict(zip(columns, r)) for r in values], fmt, columns)


@cli.command()
@db_option
@click.option("--project", help="Only projects whose folder name contains this.")
@click.option("--limit", type=int, default=None, help="At most this many rows.")
@click.option("--subagents", is_flag=True, help="Include subagent transcripts.")
@click.option("--sort", type=click.Choice(["last_timestamp", "tokens", "size"]), default="last_timestamp")
@format_options
def sessions(db_path, project, limit, subagents, sort, fmt):
    """One row per session: id, project, title, dates, lines, est. context tokens.

    Example:

        txdb sessions --sort tokens --limit 10
    """
    conn, _ = _open(db_path)
    rows = catalog.list_sessions(conn, project=project, limit=limit, include_subagents=subagents, order=sort)
    if (fmt or ("table" if sys.stdout.isatty() else "json")) == "table":
        cols = ["session_id", "project", "title", "last_timestamp", "lines", "est_context_tokens", "gauge_tokens"]
        emit_rows(rows, "table", cols)
    else:
        emit_rows(rows, fmt)


@cli.command()
@db_option
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def analyze(db_path, session, as_json):
    """Token breakdown of a session's active chain, by type, tool and attachment.

    SESSION is a session id or the path of its .jsonl file. A pending copy
    (X.jsonl.pending) or a backup (X.jsonl.bak) is read as it is and never
    catalogued; for a pending copy the positions are those the next pass uses.

    Example:

        txdb analyze 3f2a9c1e-...
        txdb analyze ~/.claude/projects/-home-me-app/3f2a9c1e-....jsonl.pending
    """
    conn, _ = _open(db_path)
    ref = catalog.resolve_session(conn, session)
    report = catalog.analyze_session(conn, ref)
    if as_json:
        echo(_json(report))
        return
    s = report["session"] or {}
    echo(f"Session {s.get('session_id')}  ({ref.path})")
    if not ref.catalogued:
        of = f" of {ref.copy_of}" if ref.copy_of else ""
        echo(f"This is {ref.kind}{of}, read as it is (not catalogued)"
             + ("; positions are the ones the next pass uses." if ref.kind == "the pending copy" else "."))
    if s.get("title"):
        echo(f"Title: {s['title']}")
    echo(
        f"Lines: {s.get('lines')}  chain: {s.get('chain_length')}  file: {s.get('file_bytes', 0):,} bytes"
    )
    e = report["estimate"]
    how = {"lsq": f"fitted on {e['turns_used']} recorded turns", "ratio": f"fitted on {e['turns_used']} recorded turns",
           "anchor": "anchored on the one recorded turn", "raw": "no recorded turn: the prior"}.get(e["method"], "")
    echo(
        f"Estimated context: {e['calibrated']:,} tokens, calibrated ({how}: "
        f"{e['factor']:g} x chars/4 + {e['overhead']:,})"
        + (f"; gauge (recorded) {s['gauge_tokens']:,}" if s.get("gauge_tokens") is not None else "")
    )
    echo(
        f"Raw chars/4: {s.get('raw_context_tokens', 0):,} tokens "
        f"(chain {s.get('chain_tokens', 0):,} + system prompt {s.get('system_prompt_tokens', 0):,})"
    )
    for title, key in (("By type", "by_type"), ("By tool", "by_tool"), ("Attachments", "attachments"),
                       ("On disk", "on_disk"), ("Chain health", "health")):
        rows = report[key]
        if rows:
            echo(f"\n{title}:")
            echo(tabulate([list(r.values()) for r in rows], headers=list(rows[0].keys())))
    cuts = report["cut_points"]
    if cuts:
        echo("\nCut points (user prompts: pos, line, tokens before):")
        shown = cuts if len(cuts) <= 12 else cuts[:6] + cuts[-6:]
        echo(tabulate([[c["pos"], c["line"], c["before_tokens"] or 0] for c in shown],
                            headers=["pos", "line", "tokens before"]))


@cli.command()
@db_option
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def verify(db_path, session, as_json):
    """Check a session's chain; exit 1 when Claude Code would not resume it whole.

    SESSION is a session id, a .jsonl path, or a .jsonl.pending copy (which
    must exist, and must end with a whole line).

    Example:

        txdb verify ~/.claude/projects/-home-me-app/3f2a9c1e-....jsonl
    """
    target = session
    if session.endswith(".pending"):
        if not os.path.isfile(session):
            original = session[: -len(".pending")]
            raise click.ClickException(
                f"no pending copy at {session}: nothing to verify (the original is {original}; "
                "a strip command or `txdb snapshot` makes a pending copy)"
            )
    else:
        conn, _ = _open(db_path)
        target = catalog.resolve_session(conn, session).path
    report = verify_file(target)
    if as_json:
        echo(_json(report.as_dict()))
    else:
        c = report.counts()
        for f in report.findings:
            where = f" line {f.line}:" if f.line else ""
            echo(f"{f.severity}:{where} {f.message}")
        status = "OK" if report.ok else "BROKEN"
        echo(
            f"{status}: {report.path}: {report.lines} lines, chain of {report.chain_length}; "
            f"{c['error']} errors, {c['warning']} warnings, {c['note']} notes"
        )
    if not report.ok:
        sys.exit(1)


@cli.command()
@db_option
@click.option("--quiet", is_flag=True, help="Print only the path.")
def current(db_path, quiet):
    """The .jsonl of the session this shell runs in ($CLAUDE_CODE_SESSION_ID).

    Example:

        SESS=$(txdb current --quiet) && txdb analyze "$SESS"
    """
    sid = os.environ.get("CLAUDE_CODE_SESSION_ID")
    if not sid:
        raise click.ClickException(
            "CLAUDE_CODE_SESSION_ID is not set: not inside a Claude Code session; name the session instead"
        )
    conn, _ = _open(db_path)
    ref = catalog.resolve_session(conn, sid)
    if quiet:
        echo(ref.path)
    else:
        echo(f"id: {sid}\npath: {ref.path}\nexists: {os.path.exists(ref.path)}")


def main():
    cli(prog_name="txdb")


if __name__ == "__main__":
    main()
