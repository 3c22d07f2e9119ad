"""`txdb cost`: what the API messages cost, by day, week, month, project, model or session."""

from __future__ import annotations

import sys

import click

from .. import cost as costlib
from .main import command, db_option, read_catalog
from .output import echo, emit_rows, to_json


def _usd(v) -> str:
    return "unpriced" if v is None else f"${v:,.2f}"


@command("cost")
@db_option
@click.option("--by", type=click.Choice(list(costlib.GROUPS)), default="day", show_default=True,
              help="Group by UTC day, week (from Monday), month, project folder, model or session.")
@click.option("--since", type=click.DateTime(["%Y-%m-%d", "%Y%m%d"]),
              help="Only API messages from this UTC day on (YYYY-MM-DD or YYYYMMDD).")
@click.option("--json", "as_json", is_flag=True,
              help="Print rows, total, unpriced models and the price library's version and data date as JSON.")
def cost(db_path, by, since, as_json):
    """What you spent: each API message once, priced in USD by genai-prices.

    Cost is computed from the stored tokens at the prices of the installed
    price library (its version and data date are printed); a model it does
    not know is listed as unpriced, never as $0. With --by session, the
    CLI's own running figure (its cost-state lines) is shown beside it.

    Example:

    \b
        txdb cost --by month
        txdb cost --by session --since 2026-11-01 --json
    """
    conn, _ = read_catalog(db_path)
    result = costlib.report(conn, by=by, since=since.date() if since else None)
    if as_json or not sys.stdout.isatty():
        echo(to_json(result))
        return
    cols = [by, "api_messages", "input_tokens", "output_tokens", "cache_creation_input_tokens",
            "cache_read_input_tokens", "cost"] + (["cli_cost"] if by == "session" else [])
    rows = [{**r, "cost": _usd(r["cost_usd"]) + (" +unpriced" if r["unpriced_messages"] and r["cost_usd"] is not None else ""),
             "cli_cost": "" if r.get("cli_cost_usd") is None else _usd(r["cli_cost_usd"])} for r in result["rows"]]
    emit_rows(rows, "table", cols)
    t, p = result["total"], result["prices"]
    echo(f"Total: {_usd(t['cost_usd'])} over {t['api_messages']:,} API messages "
         f"(prices: {p['library']} {p['version']}, data dated {p['data_date']})")
    for m in result["unpriced_models"]:
        if m["total_tokens"]:
            echo(f"Unpriced: {m['model']} ({m['api_messages']:,} messages, {m['total_tokens']:,} tokens)", err=True)
