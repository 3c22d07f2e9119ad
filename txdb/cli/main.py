"""The main command group and the commands over the catalog (path, refresh,
query, sessions, analyze, verify, current).

The group is the one place that turns errors into exits: an expected error
(a typed ``TxdbError``, an ``OSError`` on a path, SQLite reporting a locked
or full database) becomes one ``Error: ...`` line and exit 1; anything else
is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import inspect
import io
import os
import sqlite3
import signal
import sys

import click

from txdb import __version__, config
from txdb.errors import NotASession, QueryRefused, TxdbError
from txdb.cli.commands import COMMANDS
from txdb.cli.output import (echo, emit_rows, format_options, of_window, progress_bar, tabulate, terminal_safe,
    to_json, usd, wide_option)

# Each command imports what it uses when it runs (the catalog, ingest, the
# surgery engine): start-up is the interpreter, click and this module.

# Commands defined in other modules (name -> module), derived from the one
# table in ``commands.py``; a module is imported only when one of its
# commands runs (or its own --help is asked for).
LAZY_COMMANDS = {name: e.module for name, e in COMMANDS.items()}

class TxdbCommand(click.Command):
    """Every txdb command: its text arguments must be text. Bytes on the command
    line that are not UTF-8 reach Python as lone surrogates, which no JSON line,
    log row or SQLite text can hold; they are one Error line before the command
    runs. Paths (``click.Path`` options) may be any bytes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Every SESSION argument completes session ids in the shell (one
        # place for every command, whichever module defines it).
        for param in self.params:
            if isinstance(param, click.Argument) and param.name == "session" \
                    and param._custom_shell_complete is None:
                param._custom_shell_complete = complete_session

    def invoke(self, ctx):
        for param in self.params:
            if isinstance(param.type, click.Path):
                continue
            value = ctx.params.get(param.name)
            for v in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(v, str):
                    try:
                        v.encode("utf-8")
                    except UnicodeEncodeError:
                        name = param.opts[-1] if isinstance(param, click.Option) else param.name.upper()
                        raise click.ClickException(f"{name} is not valid UTF-8 text") from None
        return super().invoke(ctx)


def complete_session(ctx, param, incomplete: str):
    """Shell completion of a SESSION: the catalogued session ids starting with
    what was typed (newest first, the title as the help zsh and fish show);
    a path is left to the shell's file completion. Read-only, one indexed
    query, never an error: no catalog, a locked or broken one complete nothing."""
    from click.shell_completion import CompletionItem

    if os.sep in incomplete or "/" in incomplete or incomplete.startswith(("~", ".")):
        return [CompletionItem(incomplete, type="file")]
    try:
        path = (ctx.params.get("db_path") if ctx is not None else None) or config.default_db_path()
        if not os.path.isfile(path):
            return []
        from pathlib import Path

        from txdb.model import regular

        regular.check_sqlite_side_files(Path(path).resolve())  # (a FIFO there would hang the prompt)
        conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True, timeout=0.2)
        try:
            found = conn.execute(
                "SELECT f.session_id, s.title FROM files f LEFT JOIN sessions s ON s.file_id = f.id "
                "WHERE f.kind = 'session' AND f.session_id >= ? AND substr(f.session_id, 1, ?) = ? "
                "ORDER BY f.gone, s.last_timestamp DESC LIMIT 200",
                (incomplete, len(incomplete), incomplete)).fetchall()
        finally:
            conn.close()
    except Exception:  # completion must never break the shell's prompt
        return []
    seen: dict[str, str | None] = {}
    for sid, title in found:
        seen.setdefault(sid, title)
    return [CompletionItem(sid, help=terminal_safe(title) if title else None) for sid, title in seen.items()]


class TxdbGroup(click.Group):
    """Turns expected errors into one ``Error: ...`` line and a non-zero
    exit, and loads the modules of lazy commands on first use."""

    command_class = TxdbCommand

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def get_command(self, ctx, name):
        if name not in self.commands and name in LAZY_COMMANDS:
            importlib.import_module(LAZY_COMMANDS[name])
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        """The command list of --help, one line each, from the table for the
        commands of other modules (loaded or not: the same text)."""
        names = [n for n in self.list_commands(ctx) if n in COMMANDS or not self.commands[n].hidden]
        limit = formatter.width - 6 - max(map(len, names), default=0)
        rows = [(n, _one_line(COMMANDS[n].help, limit) if n in COMMANDS
                 else self.commands[n].get_short_help_str(limit)) for n in names]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx):
        """Every error line is made inert here, whichever library error or
        usage error it came from: it may quote a title, a path, an argument."""
        try:
            return self._invoke(ctx)
        except click.ClickException as e:
            e.message = terminal_safe(e.message)
            raise

    def _invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.ClickException:
            raise
        except BrokenPipeError:
            # The reader went away (`txdb query ... | head`): it has what it
            # wanted, so stop quietly with status 0 (which is also what a
            # single large write ending on a closed pipe gives in Python).
            _silence_stdout()
            raise click.exceptions.Exit(0) from None
        except TxdbError as e:
            raise click.ClickException(str(e)) from None
        except sqlite3.OperationalError as e:
            from txdb.catalog.db import MACHINE_CONDITIONS

            if str(e) not in MACHINE_CONDITIONS:
                raise  # a statement of ours that SQLite rejects: a bug
            raise click.ClickException(f"SQLite: {e}") from None
        except OSError as e:
            raise click.ClickException(_os_error(e)) from None
        except KeyboardInterrupt:
            # Ctrl-C: every transaction has rolled back by now. A second
            # Ctrl-C while the process winds down must not turn a clean
            # exit into a death by signal.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            raise click.exceptions.Exit(130) from None


def _one_line(text: str, limit: int) -> str:
    """``text`` cut at a word to fit ``limit`` columns, as click shortens a help."""
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 3, 0)].rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "..."


def _os_error(e: OSError) -> str:
    """``Permission denied: /the/path`` (the path when the error names one)."""
    what = e.strerror or str(e) or type(e).__name__
    names = [str(f) for f in (e.filename, e.filename2) if f is not None]
    return f"{what}: {' -> '.join(names)}" if names else what


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the final flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


def db_option(f):
    return click.option(
        "--db",
        "db_path",
        type=click.Path(dir_okay=False),
        envvar="TXDB_DB",
        help="Catalog database (default: $TXDB_DB, else a per-user data folder; see `txdb path`).",
    )(f)


def original_option(f):
    return click.option(
        "--original", is_flag=True,
        help="Read the session file even when it has a pending copy (whose positions the surgeries take).",
    )(f)


def folders_given(ctx, param, value):
    """A --root (or like) value that names a folder: an empty one is a usage
    error, never quietly the current folder."""
    for v in value or ():
        if not str(v).strip():
            raise click.BadParameter("an empty path names no folder (give the folder, e.g. ~/.claude/projects).")
    return value


def root_option(f):
    return click.option(
        "--root",
        "roots",
        multiple=True,
        type=click.Path(file_okay=False),
        callback=folders_given,
        help="Projects folder to read (repeatable; default: $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects).",
    )(f)


def open_catalog(db_path, create: bool = True):
    """(connection, path) of the catalog the command names (or the default one).

    ``create=False`` for a command that only reads: a catalog that does not
    exist is one error line (``db.no_catalog``), never a new empty one."""
    from txdb.catalog.db import connect

    path = db_path or config.default_db_path()
    return connect(path, create=create), path


def stale_note(conn, path) -> None:
    """One line on stderr while a migration's files wait for a refresh to
    read them again (``staleness.marked_for_reread``): until then their
    stored figures are of the older rule. A command on one session needs
    none: it reads that file again first (``staleness.stale``)."""
    from txdb.catalog.staleness import marked_for_reread

    n, roots = marked_for_reread(conn)
    if n:
        db = f" --db {path}" if os.path.abspath(path) != os.path.abspath(config.default_db_path()) else ""
        import shlex

        defaults = {os.path.abspath(r) for r in config.projects_roots()}
        # refresh reads only the roots it is given: name any other the marked files are under
        extra = "".join(f" --root {shlex.quote(r)}" for r in roots if os.path.abspath(r) not in defaults)
        echo(f"Note: figures stale for {n} session file{'s' if n != 1 else ''} (read by an older txdb): "
             f"run `txdb refresh{db}{extra}`", err=True)


def read_catalog(db_path, session: str | None = None):
    """``open_catalog`` for a command that only reads. Given a session
    file's path it reads that file whatever the catalog holds, so it may
    make the catalog; an id, or no session, needs an existing one."""
    if session is None:
        conn, path = open_catalog(db_path, create=False)  # `query` and co.: no catalog module (nor ingest) loaded
        stale_note(conn, path)
        return conn, path
    from txdb.catalog.sessions import looks_like_path

    return open_catalog(db_path, create=looks_like_path(session))


def command(name: str, *, group: bool = False):
    """``@cli.command(name)`` (``@cli.group(name)`` with ``group``) for a
    command of another module: its entry in ``commands.COMMANDS`` (module,
    short help) must exist and name that module. The short help is the
    first paragraph of its ``--help``; the function's docstring is the rest."""
    def decorate(f):
        entry = COMMANDS[name]
        if entry.module != f.__module__:
            raise RuntimeError(f"{name} is defined in {f.__module__}, listed in commands.py as {entry.module}")
        text = entry.help + "\n\n" + inspect.cleandoc(f.__doc__ or "")
        return (cli.group if group else cli.command)(name, short_help=entry.help, help=text)(f)
    return decorate


@click.group(cls=TxdbGroup, invoke_without_command=True)
@click.version_option(__version__, prog_name="txdb")
@click.pass_context
def cli(ctx):
    """txdb: every Claude Code session in SQLite, and safe surgery on them.

    Example:

        txdb refresh && txdb sessions
    """
    if ctx.invoked_subcommand is None:  # `txdb` alone asked for the help: on stdout, exit 0
        echo(ctx.get_help())


@cli.command()
@db_option
def path(db_path):
    """Print the path of the catalog database.

    Example:

    \b
        sqlite3 "$(txdb path)" ".tables"
    """
    echo(str(db_path or config.default_db_path()))


@cli.command()
@db_option
@root_option
@click.option("--prune", is_flag=True, hidden=True, help="Moved to `txdb prune` (an error pointing there).")
@click.option("--watch", is_flag=True,
              help="Then keep the catalog current as session files change, until Ctrl-C.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (with --watch: one line per event).")
def refresh(db_path, roots, prune, watch, as_json):
    """Index every session file, reading only what changed.

    With --watch it stays running: each change to a session file reaches the
    catalog within a second (a last line without its newline waits for it),
    new sessions and project folders are picked up, deleted files are marked
    gone (their archive kept: `txdb prune` deletes it), and Ctrl-C leaves a
    consistent catalog.

    Example:

    \b
        txdb refresh
        txdb refresh --root tests/data/projects --db /tmp/demo.db
        txdb refresh --watch
    """
    from txdb.catalog.ingest.bulk import refresh_db

    if prune:  # the archive of gone sessions goes only when asked by name: never as a side effect
        raise click.ClickException("refresh --prune is now `txdb prune`: `txdb prune --all-gone --dry-run` counts "
                                   "what it would delete, `txdb prune SESSION` or `--all-gone --yes` deletes it")
    root_paths = config.projects_roots(roots)
    with progress_bar("Refreshing", not as_json) as progress:
        stats = refresh_db(db_path or config.default_db_path(), root_paths, prune=prune, progress=progress)
    stats.swaps_logged = _catch_up_journals(db_path, stats.warnings)
    if as_json:
        d = dict(stats.__dict__)
        d["mb_per_s"] = stats.mb_per_s
        echo(to_json(d, indent=not watch))
    else:
        for r in stats.roots_missing:
            echo(f"No sessions folder at {r} (nothing to index; set --root or CLAUDE_CONFIG_DIR).", err=True)
        echo(stats.summary())
        for w in stats.warnings:  # one line each: a name in it holding a newline stays on it
            echo(terminal_safe(f"Warning: {w}"), err=True)
    if watch:
        from txdb.catalog.watch import watch as watch_roots

        watch_roots(db_path or config.default_db_path(), root_paths, prune=prune,
                    report=watch_reporter(as_json))


def _catch_up_journals(db_path, warnings: list[str]) -> int:
    """Log the swaps an apply or undo could not (killed after its rename, or
    its catalog full): the surgery code loads only when a journal is there."""
    from txdb.catalog.ingest.store import journalled_sessions

    from txdb.catalog.db import connect

    conn = connect(db_path or config.default_db_path(), prices=False)
    try:
        todo = journalled_sessions(conn)
        if not todo:
            return 0
        from txdb.surgery.log import catch_up_journals

        return catch_up_journals(conn, todo, warnings)
    finally:
        conn.close()


def watch_reporter(as_json: bool):
    """Prints what the watcher did: JSON lines on stdout, or short lines on stderr."""
    import time

    def report(event) -> None:
        if as_json:
            echo(to_json({"event": event.kind, "paths": event.paths, "status": event.status,
                          "seconds": round(event.seconds, 4), "changed": event.changed}, indent=False))
            sys.stdout.flush()
            return
        if event.kind == "watching":
            echo(f"Watching {', '.join(event.paths)} for changes (Ctrl-C to stop)", err=True)
            return
        if (event.kind == "file" and event.status == "unchanged") or not event.changed:
            return
        what = event.kind if event.kind != "file" else event.status
        where = ", ".join(event.paths)
        echo(terminal_safe(f"{time.strftime('%H:%M:%S')} {what}: {where}"
                           + (f" ({event.status})" if event.kind != "file" else "")), err=True)

    return report


@cli.command()
@db_option
@click.argument("sql")
@click.option("-p", "--param", "params", multiple=True, type=(str, str), help="Named parameter: -p name value.")
@format_options
def query(db_path, sql, params, fmt):
    """Run a read-only SQL query against the catalog.

    A record's raw JSON, stored compressed: txdb_json(file_id, offset).

    Example:

    \b
        txdb query "select type, count(*) as n from records group by type order by n desc"
        txdb query "select json_extract(txdb_json(file_id, offset), '$.cwd') from records where type = 'user' limit 1"
    """
    from txdb.catalog import db

    conn, path = read_catalog(db_path)
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
@click.option("--sort", type=click.Choice(["last_timestamp", "tokens", "size", "cost"]), default="last_timestamp",
              help="Order: newest first, or the largest est. context, file or cost (USD) first.")
@click.option("--gone", is_flag=True, help="Only what vanished from disk, as the last refresh found it (a session "
              "deleted since is listed once a refresh sees it gone): a session's file, its subagent "
              "transcripts, or both; when, and how many files, lines and bytes (view gone_sessions; "
              "`txdb restore` gives them back).")
@click.option("--urls", is_flag=True, help="Show each session's page in `txdb serve` (the url column; always in --json).")
@format_options
def sessions(db_path, project, limit, subagents, sort, gone, urls, fmt):
    """One row per session: id, project, title, dates, lines, est. context tokens, the gauge as a share
    of the session's window and its status (ok, near, over: view sessions_near_limit; gone: its file
    vanished, `txdb restore` gives it back), cost in USD, secrets found.

    Each row's url is its page in `txdb serve` (on its default port).

    Example:

    \b
        txdb sessions --sort tokens --limit 10
        txdb sessions --urls --limit 5
        txdb sessions --gone
    """
    from txdb.catalog import sessions as catalog
    from txdb.web.urls import page_ref, session_page_url

    conn, _ = read_catalog(db_path)
    if gone:
        rows = catalog.gone_sessions(conn, project=project, limit=limit)
        if (fmt or ("table" if sys.stdout.isatty() else "json")) == "table":
            # what is gone and how much of it, in one cell; at a narrow terminal the id, what and how much stay
            rows = [{**r, "gone": f"{r['gone_files']:,} file{'s' if r['gone_files'] != 1 else ''}, "
                                  f"{r['gone_lines']:,} lines, {r['gone_bytes']:,} bytes"} for r in rows]
            emit_rows(rows, "table", ["session_id", "what", "gone", "gone_at", "title", "project", "last_timestamp"],
                      drop=["last_timestamp", "project", "gone_at", "title"],
                      shrink={"session_id": 12, "project": 12, "title": 16})
        else:
            emit_rows(rows, fmt)
        before = conn.execute("SELECT count(*) FROM history_sessions WHERE status = 'gone before txdb'").fetchone()[0]
        if before:  # gone before txdb saw them: not restorable, but their prompts are kept
            echo(f"Note: {before} more session{'s' if before != 1 else ''} gone before txdb, known from "
                 "history.jsonl: `txdb history --before-txdb`", err=True)
        return
    rows = catalog.list_sessions(conn, project=project, limit=limit, include_subagents=subagents, order=sort)
    matches = catalog.file_stem_matcher(conn)  # the files read once, not once a row
    for r in rows:
        r["url"] = session_page_url(page_ref(conn, r["path"], r["file_id"], matches))
    if (fmt or ("table" if sys.stdout.isatty() else "json")) == "table":
        cols = ["session_id", "project", "title", "last_timestamp", "lines", "est_context_tokens", "gauge_tokens",
                "of_window", "status", "cost_usd", "secrets"]
        rows = [{**r, "cost_usd": None if r["cost_usd"] is None else usd(r["cost_usd"]),
                 "of_window": of_window(r["pct_of_window"], r["window_tokens"]),
                 "status": "gone" if r["gone"] else r["status"]} for r in rows]
        # at a narrow terminal the id, title, estimate, gauge and cost stay longest
        emit_rows(rows, "table", cols + ["url"] if urls else cols,
                  drop=["secrets", "lines", "gauge_tokens", "project", "last_timestamp", "status"],
                  shrink={"session_id": 12, "project": 12, "title": 16})
    else:
        emit_rows(rows, fmt)


@cli.command()
@db_option
@click.argument("session")
@original_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@wide_option
def analyze(db_path, session, original, as_json):
    """Token breakdown of a session's active chain, by type, tool and attachment.

    SESSION is a session id or the path of its .jsonl file. A session with
    a pending copy is read through that copy (the file the next surgery
    edits, so its positions are the ones --from/--to take); --original
    reads the session file. A pending copy (X.jsonl.pending) or a backup
    (X.jsonl.bak) may be named too; it is read as it is, never catalogued.

    Example:

    \b
        txdb analyze 3f2a9c1e-...
        txdb analyze ~/.claude/projects/-home-me-app/3f2a9c1e-....jsonl.pending
    """
    from txdb.catalog import sessions as catalog

    conn, _ = read_catalog(db_path, session)
    ref = positions_ref(conn, session, original)
    report = catalog.analyze_session(conn, ref)
    if as_json:
        echo(to_json(report))
        return
    s = report["session"] or {}
    echo(f"Session {s.get('session_id')}  ({ref.path})")
    echo(positions_note(ref))
    if s.get("title"):
        echo(f"Title: {s['title']}")
    echo(
        f"Lines: {s.get('lines') or 0:,}  chain: {s.get('chain_length') or 0:,}  file: {s.get('file_bytes', 0):,} bytes"
    )
    e = report["estimate"]
    turns = e.get("turns") or []
    span = f", chain positions {turns[0]}-{turns[-1]}" if len(turns) > 1 else ""
    left = f"; {e['rejected_count']:,} left out" if e.get("rejected_count") else ""
    how = {"lsq": f"fitted on {e['turns_used']:,} recorded turns{span}{left}",
           "ratio": f"fitted on {e['turns_used']:,} recorded turns{span}{left}",
           "anchor": f"anchored on the one recorded turn that describes the file{left}",
           "raw": "no recorded turn describes the file: the prior" + (f" ({e['rejected_count']:,} left out)"
                                                                      if e.get("rejected_count") else ""),
           "empty": "no message on the active chain"}.get(e["method"], "")
    if e.get("factor_logged"):  # the factor is the original's, as the surgery that wrote this file priced it
        how += "; the factor the surgery that wrote this file logged"
    echo(
        f"Estimated context: {e['calibrated']:,} tokens, calibrated ({how}: "
        f"{e['factor']:g} x chars/4 {'-' if e['overhead'] < 0 else '+'} {abs(e['overhead']):,})"
        + (f"; gauge (recorded) {s['gauge_tokens']:,}" if s.get("gauge_tokens") is not None else "")
    )
    rejected = e.get("rejected") or []
    if rejected:
        echo("Turns left out of the fit (their recorded context does not describe the file now):")
        for r in rejected[-5:]:
            echo(f"  position {r['pos']}: {r['why']}")
        if e["rejected_count"] > 5:
            echo(f"  ... and {e['rejected_count'] - 5:,} more (--json lists {len(rejected):,})")
    unsent = e.get("unsent") or 0
    echo(
        f"Raw chars/4: {s.get('raw_context_tokens', 0):,} tokens "
        + (f"(chain {s.get('chain_tokens', 0):,} + system prompt {s['system_prompt_tokens']:,})"
           if s.get("system_prompt_tokens") else
           f"(chain {s.get('chain_tokens', 0):,}; the file records no system prompt"
           + (": the overhead above stands for it and the tools)" if e.get("method") != "empty" else ")"))
        + (f"; {unsent:,} of it thinking the request does not count, left out of the estimate"
           if unsent > 0 and e.get("method") != "empty" else "")
    )
    for title, key in (("By type (tokens add up to the estimate; raw_tokens: chars/4)", "by_type"),
                       ("By tool (tokens: chars/4, as raw_tokens)", "by_tool"),
                       ("Attachments (tokens: chars/4, as raw_tokens)", "attachments"),
                       ("On disk", "on_disk"), ("Persisted (markers on the chain)", "persisted"),
                       ("Chain health", "health")):
        rows = report[key]
        if rows:
            echo(f"\n{title}:")
            headers = list(dict.fromkeys(k for r in rows for k in r))  # a row may lack a column (the fitted one)
            echo(tabulate([[r.get(k) for k in headers] for r in rows], headers=headers))
    im = report.get("images") or {}
    if im.get("images"):
        echo(f"\nImages on the active chain: {im['images']:,} ({im['in_tool_results']:,} inside tool results); "
             f"largest {im['largest_px'] or '?'} px on its long edge (txdb list-images SESSION)")
    for w in im.get("warnings") or ():
        echo(f"Warning: {w}")
    unknown: dict[str, list[str]] = {}
    for u in report.get("not_modelled") or ():
        unknown.setdefault(u["kind"], []).append(f"{u['name'] or '(none)'} ({u['count']})")
    if unknown:
        echo("\nNot modelled by txdb (stored as written; the format_census view):")
        for kind, names in unknown.items():
            echo(f"  {kind}: {', '.join(names)}")
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
    from pathlib import Path

    from txdb.catalog import sessions as catalog
    from txdb.model.paths import is_pending_name
    from txdb.model.verify import verify_file

    conn, _ = read_catalog(db_path, session)
    path = catalog.resolve_session(conn, session).path
    data = None
    if is_pending_name(Path(path).name):
        from txdb.surgery import pending as pend  # a pending copy is read as its record says, or refused

        orig = pend.original_path(path)
        data = pend.read_pending(orig, pend.read_meta(orig))
    report = verify_file(path, data=data)
    if report.lines and not report.records:
        raise NotASession(f"{report.path} is not a session: none of its {_count(report.lines, 'line')} "
                          "is a JSON record")
    if as_json:
        echo(to_json(report.as_dict()))
    else:
        c = report.counts()
        for f in report.findings:
            where = f" line {f.line}:" if f.line else ""
            echo(f"{f.severity}:{where} {f.message}")
        status = "OK" if report.ok else "BROKEN"
        echo(
            f"{status}: {report.path}: {report.lines:,} lines, chain of {report.chain_length:,}; "
            f"{_count(c['error'], 'error')}, {_count(c['warning'], 'warning')}, {_count(c['note'], 'note')}"
        )
    if not report.ok:
        raise click.exceptions.Exit(1)


def positions_ref(conn, session: str, original: bool):
    """``resolve_positions``, and a pending copy it reads through checked
    against its record's size first (a planted huge file is refused, not read)."""
    from txdb.catalog import sessions as catalog

    ref = catalog.resolve_positions(conn, session, original)
    if ref.kind == "the pending copy":
        from txdb.surgery import pending as pend

        orig = pend.original_path(ref.path)
        pend.check_pending_size(orig, pend.read_meta(orig))
    return ref


def positions_note(ref) -> str:
    """The line that says which file a report's chain positions are of."""
    if ref.catalogued:
        from txdb.surgery.pending import pending_path  # here: refresh never loads surgery

        p = pending_path(ref.path)
        if p.is_file():
            return (f"Positions of {ref.path} (the session file, asked for with --original; the next "
                    f"surgery edits its pending copy {p}, whose positions may differ)")
        return f"Positions of {ref.path} (the session file; no pending copy)"
    if ref.kind == "the pending copy":
        return (f"Positions of {ref.path} (the pending copy of {ref.copy_of}: the file the next surgery "
                "edits; not catalogued)")
    of = f" of {ref.copy_of}" if ref.copy_of else ""
    return f"Positions of {ref.path} ({ref.kind}{of}, read as it is; not catalogued)"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


@cli.command()
@db_option
@click.option("--quiet", is_flag=True, help="Print only the path.")
@click.option("--json", "as_json", is_flag=True, help="Print {id, path, exists} as JSON.")
def current(db_path, quiet, as_json):
    """The .jsonl of the session this shell runs in ($CLAUDE_CODE_SESSION_ID).

    Example:

    \b
        SESS=$(txdb current --quiet) && txdb analyze "$SESS"
    """
    from txdb.catalog import sessions as catalog

    sid = os.environ.get("CLAUDE_CODE_SESSION_ID")
    if not sid:
        raise click.ClickException(
            "CLAUDE_CODE_SESSION_ID is not set: not inside a Claude Code session; name the session instead"
        )
    conn, _ = open_catalog(db_path)
    info = catalog.current_session(conn, sid, os.getcwd())
    if as_json:
        echo(to_json(info))
    elif quiet:
        echo(info["path"])
    else:
        echo(f"id: {sid}\npath: {info['path']}\nexists: {info['exists']}")


def main():
    cli(prog_name="txdb")
