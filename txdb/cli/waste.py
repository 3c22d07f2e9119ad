"""`txdb waste`: spend a session did not need, and the command that reclaims it."""

from __future__ import annotations

import sys

import click

from txdb.cli.main import command, db_option, read_catalog
from txdb.cli.output import echo, emit_rows, format_options, terminal_safe, usd


@command("waste")
@db_option
@click.argument("session", required=False)
@click.option("--by", type=click.Choice(["session", "project", "kind"]), default="session", show_default=True,
              help="Sum per session (with the command that reclaims each), per project or per kind.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="At most this many rows.")
@click.option("--plan", is_flag=True,
              help="With SESSION: run each row's command as a dry run and show the tokens its plan saves per request.")
@format_options
def waste_cmd(db_path, session, by, limit, plan, fmt):
    """What sessions paid for that they did not need, in USD: tool results
    over 5,000 tokens re-sent by every later turn, older copies of files read
    again, superseded reminders, and cache rebuilt after more than 5 minutes
    idle. Each session row names the txdb command that stops the spend from
    the next turn on (a --where surgery, or rescue); --plan runs it as a dry
    run and shows the saving its plan gives.

    Example:

    \b
        txdb waste --limit 10
        txdb waste --by project
        txdb waste 5a73f7d9 --plan
    """
    from txdb.catalog import waste as lib

    conn, path = read_catalog(db_path, session)
    file_id = None
    if session is not None:
        from txdb.catalog.sessions import resolve_session

        ref = resolve_session(conn, session)
        if not ref.catalogued:  # a backup, a pending copy: never catalogued, so no waste of its own
            raise click.ClickException(f"{ref.path} is a {ref.kind}, not a catalogued session: "
                                       "give the session itself")
        file_id = ref.file_id
        by = "session"
    elif plan:
        raise click.UsageError("--plan takes a SESSION")
    rows = lib.report(conn, by=by, file_id=file_id, limit=limit)
    if plan:
        _add_plans(rows, str(path))
    if (fmt or ("table" if sys.stdout.isatty() else "json")) != "table":
        emit_rows(rows, fmt)
        return
    if not rows:
        echo("No waste found.")
        return
    shown = [{**r, "usd": usd(r["usd"])} for r in rows]
    cols = {"session": ["session_id", "kind", "items", "tokens", "usd"] + (["plan_saves"] if plan else [])
            + ["reclaim"], "project": ["project", "kind", "items", "tokens", "usd"],
            "kind": ["kind", "items", "tokens", "usd"]}[by]
    emit_rows(shown, "table", cols, drop=["items", "tokens"], shrink={"session_id": 12, "project": 12})
    echo(f"Total: {usd(sum(r['usd'] or 0 for r in rows))} over {len(rows)} row{'s' if len(rows) != 1 else ''}.")
    for r in rows:
        if r.get("plan_error"):
            echo(terminal_safe(f"The plan of `{r['reclaim']}` failed: {r['plan_error']}"))


def _add_plans(rows: list[dict], db_path: str) -> None:
    """Each row's reclaim command run as a dry run (a process of its own, as a
    user would run it): the tokens its plan saves per request."""
    import json
    import subprocess

    from txdb.catalog import waste as lib

    for r in rows:
        # -P: the current folder is not put on the path (a folder named txdb there would be imported)
        argv = [sys.executable, "-P", "-m", "txdb.cli", *lib.plan_argv(r["reclaim"], db_path)]
        p = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        try:
            r["plan_saves"] = lib.plan_saving(json.loads(p.stdout)) if p.returncode == 0 else None
        except ValueError:
            r["plan_saves"] = None
        if p.returncode != 0:
            r["plan_error"] = (p.stderr.strip().splitlines() or ["failed"])[-1]


