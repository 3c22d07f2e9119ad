"""What the API messages cost, in USD, from a maintained price library.

Prices come from genai-prices (pydantic's; its data ships inside the
package, so nothing is fetched). They are copied into the catalog's
``prices`` table, one row per model that ``usage`` names, per period of a
price change and per long-context tier, as USD per million tokens of each
kind (input, output, cache read, 5-minute and 1-hour cache write). The
views (``billed_cost`` and those over it) multiply stored tokens by those
rows: plain SQL, so ``sqlite3``, ``txdb query`` and Datasette read the same
figures, and a new library version re-prices every message without a
re-ingest: :func:`sync_prices` (run by ``db.connect``) refills the table
whenever the installed version is not the one recorded, and adds the
models it has not priced yet.

Each unit price is what the library's own ``calc_price`` charges for a
probe usage of one kind, so its rules (which cache tier a write falls in,
the tier thresholds, dated price changes) stay the library's.
"""

from __future__ import annotations

import datetime as _dt
import sqlite3
from decimal import Decimal
from importlib import util as _importlib_util
from pathlib import Path

LIBRARY = "genai-prices"
PROVIDER = "anthropic"
_PRICE_COLUMNS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_5m_mtok", "cache_write_1h_mtok")


def installed_version() -> str | None:
    """The installed genai-prices version, without importing it (db.connect
    asks on every open): read from its dist-info folder's name."""
    spec = _importlib_util.find_spec("genai_prices")
    if spec is None or not spec.origin:
        return None
    site = Path(spec.origin).parent.parent
    found = sorted(site.glob("genai_prices-*.dist-info"))
    if len(found) == 1:
        return found[0].name[len("genai_prices-"):-len(".dist-info")]
    from importlib import metadata

    try:
        return metadata.version(LIBRARY)
    except metadata.PackageNotFoundError:
        return None


def _start_date(constraint) -> _dt.date | None:
    start = getattr(constraint, "start_date", None)
    return start if isinstance(start, _dt.date) else None


def data_date() -> str | None:
    """The newest dated change of Anthropic's prices the library's data holds
    (ISO date): how recent the prices txdb uses are known to be (the
    package carries no date of its own)."""
    from genai_prices import data_snapshot

    newest = None
    for provider in data_snapshot.get_snapshot().providers:
        if provider.id != PROVIDER:
            continue
        for model in provider.models:
            conditions = [getattr(p, "constraint", None) for p in model.prices] \
                if isinstance(model.prices, list) else []
            conditions += [v.constraint for v in model.price_variants or ()]
            for c in conditions:
                d = _start_date(c)
                if d and (newest is None or d > newest):
                    newest = d
    return newest.isoformat() if newest else None


def _periods(model) -> list[tuple[str, str | None, _dt.datetime]]:
    """(valid_from, valid_until, a moment inside) of each period between the
    model's dated price changes ('' / None: open ends)."""
    starts = sorted({d for p in (model.prices if isinstance(model.prices, list) else [])
                     if (d := _start_date(getattr(p, "constraint", None)))})
    if not starts:
        return [("", None, _dt.datetime.now(_dt.UTC))]
    bounds = ["", *(d.isoformat() for d in starts)]
    moments = [_dt.datetime.combine(starts[0] - _dt.timedelta(days=1), _dt.time(12), _dt.UTC)]
    moments += [_dt.datetime.combine(d, _dt.time(12), _dt.UTC) for d in starts]
    return [(bounds[i], bounds[i + 1] if i + 1 < len(bounds) else None, moments[i]) for i in range(len(bounds))]


def _tier_starts(model_price) -> list[int]:
    starts = {0}
    for value in vars(model_price).values():
        for tier in getattr(value, "tiers", None) or ():
            starts.add(int(tier.start))
    return sorted(starts)


def _unit_prices(model_ref: str, above: int, at: _dt.datetime) -> dict[str, float]:
    """USD per million tokens of each kind, for a message whose input is
    just above ``above`` tokens, as the library's calc_price charges it."""
    from genai_prices import Usage, calc_price

    n = above + 1
    probes = {
        "input_mtok": dict(input_tokens=n),
        "cache_read_mtok": dict(input_tokens=n, cache_read_tokens=n),
        "cache_write_5m_mtok": dict(input_tokens=n, cache_write_tokens=n, cache_write_5m_tokens=n),
        "cache_write_1h_mtok": dict(input_tokens=n, cache_write_tokens=n, cache_write_1h_tokens=n),
    }
    out = {}
    for column, usage in probes.items():
        r = calc_price(Usage(**usage), model_ref, provider_id=PROVIDER, genai_request_timestamp=at)
        out[column] = float(r.input_price * Decimal(1_000_000) / n)
    r = calc_price(Usage(input_tokens=n, output_tokens=n), model_ref, provider_id=PROVIDER,
                   genai_request_timestamp=at)
    out["output_mtok"] = float(r.output_price * Decimal(1_000_000) / n)
    return out


def price_rows(models: list[str], version: str) -> list[dict]:
    """The ``prices`` rows of these models (one unpriced row for a model the
    library does not know)."""
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    date = data_date()
    rows = []
    for name in models:
        base = {"model": name, "library": LIBRARY, "library_version": version, "data_date": date}
        try:
            _, model = snapshot.find_provider_model(name, None, PROVIDER, None)
            priced = [{**base, "valid_from": valid_from, "valid_until": valid_until, "above_tokens": above,
                       "priced_as": model.id, **_unit_prices(name, above, at)}
                      for valid_from, valid_until, at in _periods(model)
                      for above in _tier_starts(model.get_prices(at))]
        except (LookupError, ValueError, TypeError, AttributeError, ArithmeticError):
            # not a model the library knows (or one it cannot price): unpriced,
            # never a reason for opening the catalog to fail
            priced = [{**base, "valid_from": "", "valid_until": None, "above_tokens": 0, "priced_as": None,
                       **dict.fromkeys(_PRICE_COLUMNS)}]
        rows += priced
    return rows


_NEW_MODELS = ("SELECT DISTINCT model FROM usage WHERE model IS NOT NULL "
               "AND model NOT IN (SELECT model FROM prices)")


def sync_prices(conn: sqlite3.Connection) -> bool:
    """Make ``prices`` hold the installed library's prices for every model
    ``usage`` names; True when it changed. Cheap when nothing did: the
    library is imported only when its version or the models changed."""
    version = installed_version()
    if version is None:
        return False  # no library: the figures already there stay, new models stay unpriced
    recorded = conn.execute("SELECT DISTINCT library_version FROM prices").fetchall()
    stale = recorded not in ([], [(version,)])
    if not stale and not conn.execute(_NEW_MODELS + " LIMIT 1").fetchone():
        return False
    from .db import transaction

    with transaction(conn):
        if stale:
            conn.execute("DELETE FROM prices")
        models = [r[0] for r in conn.execute(_NEW_MODELS)]
        rows = price_rows(models, version)
        if rows:
            cols = list(rows[0])
            conn.executemany(f"INSERT INTO prices ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                             [tuple(r[c] for c in cols) for r in rows])
    return True


def price_source(conn: sqlite3.Connection) -> dict:
    """Which library priced the catalog: name, version, date of its data."""
    row = conn.execute("SELECT library, library_version, data_date FROM prices LIMIT 1").fetchone()
    if row is None:
        return {"library": LIBRARY, "version": installed_version(), "data_date": None}
    return {"library": row[0], "version": row[1], "data_date": row[2]}


# How `txdb cost --by` groups each API message (billed_cost u, files f).
GROUPS = {
    "day": "substr(u.timestamp, 1, 10)",
    "week": "date(u.timestamp, '-6 days', 'weekday 1')",  # the Monday it falls in (UTC)
    "month": "substr(u.timestamp, 1, 7)",
    "project": "f.project",
    "model": "coalesce(u.model, '(none)')",
    "session": "coalesce(s.parent_session_id, s.session_id)",  # as `txdb sessions` lists it: a subagent's under its parent
}
_SUMS = """count(*) AS api_messages,
       sum(coalesce(u.input_tokens, 0)) AS input_tokens,
       sum(coalesce(u.output_tokens, 0)) AS output_tokens,
       sum(coalesce(u.cache_creation_input_tokens, 0)) AS cache_creation_input_tokens,
       sum(coalesce(u.cache_read_input_tokens, 0)) AS cache_read_input_tokens,
       sum(u.billed_tokens) AS total_tokens,
       round(sum(u.cost_usd), 6) AS cost_usd,
       sum(u.cost_usd IS NULL) AS unpriced_messages"""


def report(conn: sqlite3.Connection, by: str = "day", since: _dt.date | None = None) -> dict:
    """What was spent, grouped ``by`` day, week, month, project, model or
    session (then with the CLI's own figure, ``cli_cost_usd``), from
    ``since`` (a UTC day) on: rows, the total, the models left unpriced
    and the price source."""
    from .db import rows as _rows

    key = GROUPS[by]
    where, params = ("WHERE u.timestamp >= ?", [since.isoformat()]) if since else ("", [])
    extra = ""
    join = ""
    if by == "session":
        join = " JOIN sessions s ON s.file_id = u.file_id"
        own = f"FROM sessions t JOIN files tf ON tf.id = t.file_id WHERE t.session_id = {key} AND tf.kind = 'session'"
        extra = (f", (SELECT t.title {own} ORDER BY tf.gone, t.file_id LIMIT 1) AS title, "
                 "min(f.project) AS project, min(u.timestamp) AS first_timestamp, "
                 "max(u.timestamp) AS last_timestamp, "
                 f"(SELECT max(c.cli_cost_usd) FROM cli_cost c WHERE c.file_id IN (SELECT t.file_id {own})) "
                 "AS cli_cost_usd")
    elif by == "model":
        extra = ", min(u.priced_as) AS priced_as"
    rows = _rows(conn, f"SELECT {key} AS {by}, {_SUMS}{extra} FROM billed_cost u JOIN files f ON f.id = u.file_id"
                       f"{join} {where} GROUP BY {key} ORDER BY {key}", params)
    # The total adds up the rows (one pass over the messages, not two).
    total = {k: sum(r[k] for r in rows) for k in ("api_messages", "input_tokens", "output_tokens",
                                                  "cache_creation_input_tokens", "cache_read_input_tokens",
                                                  "total_tokens", "unpriced_messages")}
    costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    total = {**total, "cost_usd": round(sum(costs), 6) if costs else None}
    unpriced = _rows(conn, "SELECT coalesce(u.model, '(none)') AS model, count(*) AS api_messages, "
                           "sum(u.billed_tokens) "
                           f"AS total_tokens FROM billed_cost u {where} {'AND' if where else 'WHERE'} "
                           "u.cost_usd IS NULL GROUP BY 1 ORDER BY 1", params) if total["unpriced_messages"] else []
    return {"by": by, "since": since.isoformat() if since else None, "prices": price_source(conn),
            "rows": rows, "total": total, "unpriced_models": unpriced}
