"""`txdb cost`: what the API messages cost, by day, week, month, project, model or session."""

from __future__ import annotations

import sys

import click

from .. import cost as costlib
from .main import command, db_option, read_catalog
from .output import clip, echo, emit_rows, format_options, to_json, usd


@command("cost")
@db_option
@click.option("--by", type=click.Choice(list(costlib.GROUPS)), default="day", show_default=True,
              help="Group by UTC day, week (from Monday), month, project folder, model or session.")
@click.option("--since", type=click.DateTime(["%Y-%m-%d", "%Y%m%d"]),
              help="Only API messages from this UTC day on (YYYY-MM-DD or YYYYMMDD).")
@format_options
def cost(db_path, by, since, fmt):
    """Cost is computed from the stored tokens at the prices of the installed
    price library (its version and data date are printed); a model it does
    not know is listed as unpriced, never as $0. With --by session, the
    CLI's own running figure (its cost-state lines) is shown beside it.
    --json prints the rows, the total, the unpriced models and the price
    library's version and data date; --csv and --nl the rows.

    Example:

    \b
        txdb cost --by month
        txdb cost --by session --since 2026-11-01 --json
    """
    conn, _ = read_catalog(db_path)
    result = costlib.report(conn, by=by, since=since.date() if since else None)
    fmt = fmt or ("table" if sys.stdout.isatty() else "json")
    if fmt == "json":
        echo(to_json(result))
        return
    if fmt != "table":
        emit_rows(result["rows"], fmt)
        return
    cols = [by] + (["title"] if by == "session" else []) + [
        "api_messages", "input_tokens", "output_tokens", "cache_creation_input_tokens",
        "cache_read_input_tokens", "cost"] + (["cli_cost"] if by == "session" else [])
    rows = [{**r, "title": clip(r.get("title") or "", 40), "cost": usd(r["cost_usd"]) + (" +unpriced" if r["unpriced_messages"] and r["cost_usd"] is not None else ""),
             "cli_cost": "" if r.get("cli_cost_usd") is None else usd(r["cli_cost_usd"])} for r in result["rows"]]
    emit_rows(rows, "table", cols)
    t, p = result["total"], result["prices"]
    echo(f"Total: {usd(t['cost_usd'])} over {t['api_messages']:,} API messages "
         f"(prices: {p['library']} {p['version']}, data dated {p['data_date']})")
    for m in result["unpriced_models"]:
        if m["total_tokens"]:
            echo(f"Unpriced: {m['model']} ({m['api_messages']:,} messages, {m['total_tokens']:,} tokens)", err=True)
