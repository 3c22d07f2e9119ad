"""`txdb cost`: what the API messages cost, by day, week, month, 5-hour block, project, model or session."""

from __future__ import annotations

import sys

import click

from txdb.catalog import cost as costlib
from txdb.cli.main import command, db_option, read_catalog
from txdb.cli.output import clip, echo, emit_rows, format_options, to_json, usd

_DAY = click.DateTime(["%Y-%m-%d", "%Y%m%d"])


def _limit(value):
    if value is None or value == "max":
        return value
    try:
        n = int(value)
    except ValueError:
        raise click.BadParameter("a number of tokens, or 'max'") from None
    if n <= 0:
        raise click.BadParameter("a positive number of tokens, or 'max'")
    return n


def _cost_cell(r) -> str:
    if r["cost_usd"] is None:
        return "unpriced" if r.get("unpriced_messages") else usd(None)
    return usd(r["cost_usd"]) + (" +unpriced" if r.get("unpriced_messages") else "")


def _minutes(m: float) -> str:
    return f"{int(m // 60)}h {int(m % 60):02d}m"


@command("cost")
@db_option
@click.option("--by", type=click.Choice(list(costlib.GROUPS)), default="day", show_default=True,
              help="Group by day, week (from Monday), month, 5-hour block, project folder, model or session.")
@click.option("--since", type=_DAY, help="Only API messages from this day on (YYYY-MM-DD or YYYYMMDD).")
@click.option("--until", type=_DAY, help="Only API messages up to this day, inclusive.")
@click.option("--timezone", "tz", metavar="TZ",
              help="Days (and --since/--until) in this IANA zone, e.g. Europe/Paris (default UTC).")
@click.option("--order", type=click.Choice(["asc", "desc"]),
              help="Row order: by time oldest first, sessions and projects highest cost first; desc/asc turns it.")
@click.option("--sort", type=click.Choice(list(costlib.SORTS)), default="cost", show_default=True,
              help="With --by session or project: by cost, or by last activity.")
@click.option("--breakdown", is_flag=True, help="The models inside each row.")
@click.option("--token-limit", "token_limit", metavar="N|max",
              help="With --by block: each block's share of N tokens ('max': the largest past block).")
@format_options
def cost(db_path, by, since, until, tz, order, sort, breakdown, token_limit, fmt):
    """Cost is computed from the stored tokens at the prices of the installed
    price library (its version and data date are printed); a model it does
    not know, or a name that only looks like one it knows, is listed as
    unpriced with the reason, never as $0. <synthetic> messages (written by
    Claude Code itself, no API call) cost $0. A usage record with an invalid
    count (negative, out of range, not an integer) is left out and counted.
    With --by session, the CLI's own running figure (its cost-state lines)
    is shown beside it. --by block: the 5-hour blocks Claude's usage limits
    count in; the active one with its burn rate, projection and time left.
    --json prints the rows, the total, the unpriced models, what was left
    out and the price library's version and data date; --csv and --nl the rows.

    Example:

    \b
        txdb cost --by month
        txdb cost --by block --token-limit max
        txdb cost --since 2026-11-01 --timezone Europe/Paris --breakdown
        txdb cost --by session --sort last-activity --json
    """
    token_limit = _limit(token_limit)
    conn, _ = read_catalog(db_path)
    result = costlib.report(conn, by=by, since=since.date() if since else None,
                            until=until.date() if until else None, tz=tz, order=order,
                            breakdown=breakdown, sort=sort, token_limit=token_limit)
    fmt = fmt or ("table" if sys.stdout.isatty() else "json")
    if fmt == "json":
        echo(to_json(result))
        return
    if fmt != "table":
        rows = result["rows"]
        if fmt == "csv":  # a nested figure (models, burn rate) as one JSON cell
            rows = [{k: to_json(v, indent=False) if isinstance(v, (dict, list)) else v for k, v in r.items()} for r in rows]
        emit_rows(rows, fmt)
        return
    if by == "block":
        _block_table(result, breakdown)
    else:
        cols = [by] + (["title"] if by == "session" else []) + [
            "api_messages", "input_tokens", "output_tokens", "cache_creation_input_tokens",
            "cache_read_input_tokens", "cost"] + (["cli_cost"] if by == "session" else [])
        rows = []
        for r in result["rows"]:
            rows.append({**r, "title": clip(r.get("title") or "", 40), "cost": _cost_cell(r),
                         "cli_cost": "" if r.get("cli_cost_usd") is None else usd(r["cli_cost_usd"])})
            for m in r.get("models") or () if breakdown else ():
                rows.append({**m, "title": "", by: f"  └ {m['model']}",
                             "cost": _cost_cell(m), "cli_cost": ""})
        emit_rows(rows, "table", cols)
    _footer(result)


def _block_table(result, breakdown: bool) -> None:
    limit = result.get("token_limit")
    cols = ["block_start", "status", "models", "api_messages", "total_tokens"] + (["of_limit"] if limit else []) \
        + ["cost"]
    rows = []
    for r in result["rows"]:
        status = "ACTIVE" if r["is_active"] else (r["last_timestamp"][11:16] + " last")
        rows.append({**r, "block_start": (r.get("block_start_local") or r["block_start"])[:16].replace("T", " "),
                     "status": status, "models": clip(r["models"], 40), "cost": _cost_cell(r),
                     "of_limit": f"{r.get('percent_of_limit', 0):.1f}%"})
        for m in r.get("model_rows") or () if breakdown else ():
            rows.append({**m, "block_start": "", "status": "", "models": f"  └ {m['model']}",
                         "cost": _cost_cell(m), "of_limit": ""})
    emit_rows(rows, "table", cols)
    a = result.get("active_block")
    if a:
        line = f"Active block: {_minutes(a['minutes_left'])} left (ends {a['block_end'][11:16]} UTC)"
        if a.get("burn_rate"):
            b, p = a["burn_rate"], a["projection"]
            line += (f"; burn rate {b['tokens_per_minute']:,.0f} tokens/min"
                     + (f", {usd(b['cost_usd_per_hour'])}/h" if b["cost_usd_per_hour"] is not None else "")
                     + f"; projected {p['total_tokens']:,} tokens"
                     + (f", {usd(p['cost_usd'])}" if p["cost_usd"] is not None else "")
                     + (f" ({p['percent_of_limit']:.1f}% of {limit:,})" if limit else ""))
        echo(line)


def _footer(result) -> None:
    t, p = result["total"], result["prices"]
    echo(f"Total: {usd(t['cost_usd'])} over {t['api_messages']:,} API messages "
         f"(prices: {p['library']} {p['version']}, data dated {p['data_date']})")
    for m in result["unpriced_models"]:
        echo(f"Unpriced: {m['model']} ({m['api_messages']:,} messages, {m['total_tokens'] or 0:,} tokens): {m['why']}",
             err=True)
    lo = result["left_out"]
    if lo["usage_records"]:
        why = ", ".join(f"{lo[k]:,} {k.replace('_', ' ')}" for k in ("negative", "out_of_range", "not_an_integer")
                        if lo[k])
        first = lo["examples"][0]
        echo(f"Left out: {lo['usage_records']:,} usage records with an invalid count ({why}), never priced; "
             f"first: {first['invalid']} in session {first['session_id']}", err=True)
