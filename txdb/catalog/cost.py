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
import re
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


def _unit_prices(model_ref: str, above: int, at: _dt.datetime, provider: str = PROVIDER) -> dict[str, float]:
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
        r = calc_price(Usage(**usage), model_ref, provider_id=provider, genai_request_timestamp=at)
        out[column] = float(r.input_price * Decimal(1_000_000) / n)
    r = calc_price(Usage(input_tokens=n, output_tokens=n), model_ref, provider_id=provider,
                   genai_request_timestamp=at)
    out["output_mtok"] = float(r.output_price * Decimal(1_000_000) / n)
    return out


# What may follow a name the library matches by its start, for the name to
# be that model's: a release date, an alias, a region/version tag.
_SUFFIX = re.compile(r"(?:[-@]\d{8}|[-@]\d{4}-\d{2}-\d{2}|-latest|@latest|-v\d+(?::\d+)?)?")
# <synthetic>: messages Claude Code writes itself (an interruption, an
# error), no API call: $0 by definition.
SYNTHETIC = "<synthetic>"


def _leaves(clause):
    for part in (getattr(clause, "or_", None) or getattr(clause, "and_", None) or ()):
        yield from _leaves(part)
    if not (getattr(clause, "or_", None) or getattr(clause, "and_", None)):
        yield clause


def is_named(name: str, model) -> bool:
    """``name`` is the library model's own name: its id, a name its match
    states whole (equals, an anchored regex), or a prefix it matches by
    followed by nothing but a release date or alias (``_SUFFIX``). The
    library's own match takes any name that starts like a model's
    (claude-opus-4-5-evil would be priced as claude-opus-4-5)."""
    low = name.lower()
    base = low
    m = re.search(r"(?:[-@]\d{8}|[-@]\d{4}-\d{2}-\d{2}|-latest|@latest|-v\d+(?::\d+)?)$", low)
    if m:
        base = low[:m.start()]
    if base == model.id.lower() or low == model.id.lower():
        return True
    for c in _leaves(model.match):
        if (v := getattr(c, "equals", None)) is not None and v.lower() in (low, base):
            return True
        if (v := getattr(c, "regex", None)) is not None and re.fullmatch(v, low):
            return True
        for attr in ("starts_with", "contains"):
            v = getattr(c, attr, None)
            if v is not None and low.startswith(v.lower()) and _SUFFIX.fullmatch(low[len(v):]):
                return True
    return False


def _find(snapshot, name: str):
    """(provider id, model) the library prices ``name`` as: Anthropic's
    first, else the provider it finds by the name (a MiniMax or Kimi model
    behind Claude Code); LookupError when it knows none."""
    try:
        provider, model = snapshot.find_provider_model(name, None, PROVIDER, None)
    except LookupError:
        provider, model = snapshot.find_provider_model(name, None, None, None)
    return provider.id, model


def price_rows(models: list[str], version: str) -> list[dict]:
    """The ``prices`` rows of these models: one unpriced row for a model the
    library does not know, or names only by resemblance (``resembles``:
    the model it would have priced it as); <synthetic> at $0."""
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    date = data_date()
    rows = []
    for name in models:
        base = {"model": name, "library": LIBRARY, "library_version": version, "data_date": date}
        unpriced = {**base, "valid_from": "", "valid_until": None, "above_tokens": 0, "priced_as": None,
                    "provider": None, "resembles": None, **dict.fromkeys(_PRICE_COLUMNS)}
        if name == SYNTHETIC:
            rows.append({**unpriced, "priced_as": SYNTHETIC, "provider": "claude-code",
                         **dict.fromkeys(_PRICE_COLUMNS, 0.0)})
            continue
        try:
            provider, model = _find(snapshot, name)
            if not is_named(name, model):
                rows.append({**unpriced, "resembles": model.id})
                continue
            priced = [{**base, "valid_from": valid_from, "valid_until": valid_until, "above_tokens": above,
                       "priced_as": model.id, "provider": provider, "resembles": None,
                       **_unit_prices(name, above, at, provider)}
                      for valid_from, valid_until, at in _periods(model)
                      for above in _tier_starts(model.get_prices(at))]
        except (LookupError, ValueError, TypeError, AttributeError, ArithmeticError):
            # not a model the library knows (or one it cannot price): unpriced,
            # never a reason for opening the catalog to fail
            priced = [unpriced]
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
    from txdb.catalog.sqlutil import transaction

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


# How `txdb cost --by` groups each API message (billed_cost u, files f,
# sessions s; {t}: the message's time in the report's zone, ISO).
GROUPS = {
    "day": "substr({t}, 1, 10)",
    "week": "date({t}, '-6 days', 'weekday 1')",  # the Monday it falls in
    "month": "substr({t}, 1, 7)",
    "project": "f.project",
    "model": "coalesce(u.model, '(none)')",
    "session": "coalesce(s.parent_session_id, s.session_id)",  # as `txdb sessions` lists it: a subagent's under its parent
    "block": None,  # 5-hour blocks: see blocks()
}
SORTS = ("cost", "last-activity")
TIME_GROUPS = ("day", "week", "month", "block")
_FIGURES = ("api_messages", "input_tokens", "output_tokens", "cache_creation_input_tokens",
            "cache_read_input_tokens", "total_tokens", "unpriced_messages")
# priced_messages: messages the library priced, <synthetic> ones (cost 0 by
# definition) left out, so a row of only those and unpriced ones is unpriced.
_SUMS = """count(*) AS api_messages,
       sum(coalesce(u.input_tokens, 0)) AS input_tokens,
       sum(coalesce(u.output_tokens, 0)) AS output_tokens,
       sum(coalesce(u.cache_creation_input_tokens, 0)) AS cache_creation_input_tokens,
       sum(coalesce(u.cache_read_input_tokens, 0)) AS cache_read_input_tokens,
       sum(u.billed_tokens) AS total_tokens,
       round(sum(u.cost_usd), 6) AS cost_usd,
       sum(u.cost_usd IS NULL) AS unpriced_messages,
       sum(u.cost_usd IS NOT NULL AND u.model IS NOT '<synthetic>') AS priced_messages,
       max(u.timestamp) AS last_timestamp"""


def _zone(tz: str | None):
    """The zoneinfo zone of ``tz`` (None: UTC)."""
    if tz in (None, "", "UTC", "Z"):
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from txdb.errors import TxdbError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise TxdbError(f"unknown time zone {tz!r} (an IANA name such as Europe/Paris)") from None


def _local_function(conn: sqlite3.Connection, zone) -> None:
    """txdb_local(ts): an ISO UTC timestamp as the zone's local time
    (YYYY-MM-DDTHH:MM:SS), for grouping by the user's days."""
    from functools import lru_cache

    @lru_cache(maxsize=4096)
    def offset_of(hour: str) -> _dt.timedelta:  # zone offsets change on the hour
        at = _dt.datetime.fromisoformat(hour + ":00:00+00:00")
        return at.astimezone(zone).utcoffset() or _dt.timedelta(0)

    def local(ts):
        if not isinstance(ts, str) or len(ts) < 19:
            return None
        try:
            at = _dt.datetime.fromisoformat(ts[:19]) + offset_of(ts[:13])
        except ValueError:
            return None
        return at.isoformat()

    conn.create_function("txdb_local", 1, local, deterministic=True)


def _utc_bound(day: _dt.date, zone) -> str:
    """The UTC instant a local day starts at, as stored timestamps compare."""
    at = _dt.datetime.combine(day, _dt.time(0), zone or _dt.UTC).astimezone(_dt.UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _finish(row: dict) -> dict:
    """A row's cost is None (unpriced) when the library priced none of its
    messages but some stayed unpriced (a $0.00 of <synthetic> ones alone
    would mislead)."""
    priced = row.pop("priced_messages", 0) or 0
    if row["unpriced_messages"] and not priced:
        row["cost_usd"] = None
    return row


def _total(rows: list[dict]) -> dict:
    """The rows summed; its cost is None (unpriced) only when some message
    went unpriced and none was priced: no message at all costs 0."""
    total = {k: sum(r.get(k) or 0 for r in rows) for k in _FIGURES}
    costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    cost = round(sum(costs), 6) if costs else (None if total["unpriced_messages"] else 0.0)
    return {**total, "cost_usd": cost}


def report(conn: sqlite3.Connection, by: str = "day", since: _dt.date | None = None,
           until: _dt.date | None = None, tz: str | None = None, order: str | None = None,
           breakdown: bool = False, sort: str = "cost", session: str | None = None,
           token_limit: int | str | None = None, now: _dt.datetime | None = None) -> dict:
    """What was spent, grouped ``by`` day, week, month (in the zone ``tz``,
    default UTC), 5-hour block (see :func:`blocks`), project, model or
    session (then with the CLI's own figure, ``cli_cost_usd``), over the
    days ``since`` to ``until`` (inclusive, in that zone) and, given
    ``session``, that session's messages only (its subagents' included):
    rows, the total, the models left unpriced (each with why), the usage
    records left out for an invalid count, and the price source.

    Rows by time run oldest first, sessions and projects by cost, highest
    first (``sort='last-activity'``: latest first); ``order`` ('asc' or
    'desc') turns either. ``breakdown``: each row holds its ``models``."""
    from txdb.catalog.sqlutil import rows as _rows

    zone = _zone(tz)
    if zone is not None:
        _local_function(conn, zone)
    t = "txdb_local(u.timestamp)" if zone is not None else "u.timestamp"
    where, params = ["u.invalid IS NULL"], []
    if since:
        where.append("u.timestamp >= ?")
        params.append(_utc_bound(since, zone))
    if until:
        where.append("u.timestamp < ?")
        params.append(_utc_bound(until + _dt.timedelta(days=1), zone))
    join = " JOIN sessions s ON s.file_id = u.file_id"
    if session:
        where.append("coalesce(s.parent_session_id, s.session_id) = ?")
        params.append(session)
    clause = " WHERE " + " AND ".join(where)
    base = {"by": by, "since": since.isoformat() if since else None, "until": until.isoformat() if until else None,
            "timezone": tz or "UTC", "session": session, "prices": price_source(conn)}
    if by == "block":
        out = blocks(conn, clause, params, token_limit=token_limit, now=now, zone=zone, breakdown=breakdown)
        rows = out.pop("rows")
        if order == "desc":
            rows.reverse()
    else:
        key = GROUPS[by].format(t=t)
        extra = ""
        if by == "session":
            own = (f"FROM sessions t JOIN files tf ON tf.id = t.file_id WHERE t.session_id = {key} "
                   "AND tf.kind = 'session'")
            extra = (f", (SELECT t.title {own} ORDER BY tf.gone, t.file_id LIMIT 1) AS title, "
                     "min(f.project) AS project, min(u.timestamp) AS first_timestamp, "
                     f"(SELECT max(c.cli_cost_usd) FROM cli_cost c WHERE c.file_id IN (SELECT t.file_id {own})) "
                     "AS cli_cost_usd")
        elif by == "project":
            extra = ", count(DISTINCT coalesce(s.parent_session_id, s.session_id)) AS sessions"
        elif by == "model":
            extra = ", min(u.priced_as) AS priced_as"
        if by in ("session", "project"):
            orderby = ("last_timestamp" if sort == "last-activity" else "cost_usd IS NULL, cost_usd")
            orderby += " ASC" if order == "asc" else " DESC"
            orderby = orderby.replace("cost_usd IS NULL ASC", "cost_usd IS NULL")
            orderby += f", {by}"
        else:
            orderby = f"{by} {'DESC' if order == 'desc' else 'ASC'}"
        rows = [_finish(r) for r in _rows(
            conn, f"SELECT {key} AS {by}, {_SUMS}{extra} FROM billed_cost u JOIN files f ON f.id = u.file_id"
                  f"{join}{clause} GROUP BY {key} ORDER BY {orderby}", params)]
        if breakdown and by != "model":
            models: dict = {}
            for r in _rows(conn, f"SELECT {key} AS grp, coalesce(u.model, '(none)') AS model, {_SUMS} "
                                 f"FROM billed_cost u JOIN files f ON f.id = u.file_id{join}{clause} "
                                 f"GROUP BY 1, 2 ORDER BY 1, cost_usd IS NULL, cost_usd DESC, 2", params):
                r.pop("last_timestamp")
                models.setdefault(r.pop("grp"), []).append(_finish(r))
            for r in rows:
                r["models"] = models.get(r[by], [])
        out = {}
    unpriced = _rows(conn, "SELECT coalesce(u.model, '(none)') AS model, count(*) AS api_messages, "
                           "sum(u.billed_tokens) AS total_tokens, "
                           "(SELECT p.resembles FROM prices p WHERE p.model = u.model LIMIT 1) AS resembles "
                           f"FROM billed_cost u JOIN files f ON f.id = u.file_id{join}{clause} "
                           "AND u.cost_usd IS NULL GROUP BY 1 ORDER BY 1", params) \
        if any(r["unpriced_messages"] for r in rows) else []
    for m in unpriced:
        m["why"] = (f"resembles {m['resembles']} but is not that model's name" if m["resembles"]
                    else "not a model the price library knows")
    return {**base, "rows": rows, "total": _total(rows), "unpriced_models": unpriced,
            "left_out": left_out(conn, " WHERE " + " AND ".join(where[1:]) if where[1:] else "", params), **out}


def left_out(conn: sqlite3.Connection, clause: str = "", params=()) -> dict:
    """The usage records a report leaves out because a count is invalid
    (usage.invalid: negative, out of range, not an integer): how many, how
    many of each reason, and a few as written, with their session."""
    cond = ("AND" if clause else "WHERE") + " u.invalid IS NOT NULL"
    sql = (f"FROM billed_cost u JOIN files f ON f.id = u.file_id JOIN sessions s ON s.file_id = u.file_id "
           f"{clause} {cond}")
    row = conn.execute(
        "SELECT count(*), sum(u.invalid LIKE '%(negative)%'), sum(u.invalid LIKE '%(out of range)%'), "
        f"sum(u.invalid LIKE '%(not an integer)%') {sql}", list(params)).fetchone()
    out = {"usage_records": row[0], "negative": row[1] or 0, "out_of_range": row[2] or 0,
           "not_an_integer": row[3] or 0, "examples": []}
    if row[0]:
        out["examples"] = [{"session_id": r[0], "message_id": r[1], "invalid": r[2]} for r in conn.execute(
            f"SELECT s.session_id, u.message_id, u.invalid {sql} ORDER BY u.timestamp LIMIT 3", list(params))]
    return out


def blocks(conn: sqlite3.Connection, clause: str = " WHERE u.invalid IS NULL", params=(),
           token_limit: int | str | None = None, now: _dt.datetime | None = None, zone=None,
           breakdown: bool = False) -> dict:
    """The 5-hour blocks Claude's usage limits count in, over every API
    message once, oldest first: a block starts at its first message's hour
    (UTC, floored) and holds the messages up to 5 hours after that start
    (a message more than 5 hours after it, so after any gap of more than
    5 hours, starts the next one). A block whose 5 hours have not ended and
    whose last message is less than 5 hours old is active: it carries its
    burn rate (tokens a minute, dollars an hour, over its first to last
    message), the projection to its end at that rate and the minutes left.
    ``token_limit`` (a count, or 'max': the largest tokens of a block not
    active) adds each block's share of it (``percent_of_limit``; the active
    block's projection has its own). One pass over the messages in time order."""
    from txdb.catalog import blocks as rule  # the one 5-hour rule, the status line's too

    now = now or _dt.datetime.now(_dt.UTC)
    rows: list[dict] = []
    cur: dict | None = None
    end = None
    sql = (f"SELECT u.timestamp, coalesce(s.parent_session_id, s.session_id), coalesce(u.model, '(none)'), "
           "coalesce(u.input_tokens, 0), coalesce(u.output_tokens, 0), coalesce(u.cache_creation_input_tokens, 0), "
           "coalesce(u.cache_read_input_tokens, 0), u.billed_tokens, u.cost_usd "
           f"FROM billed_cost u JOIN files f ON f.id = u.file_id JOIN sessions s ON s.file_id = u.file_id"
           f"{clause} AND u.timestamp IS NOT NULL ORDER BY u.timestamp")
    for ts, sid, model, inp, out, cw, cr, total, usd in conn.execute(sql, list(params)):
        try:
            at = rule.parse_ts(ts)
        except ValueError:
            continue
        if cur is None or rule.starts_block(at, end):
            start, end = rule.bounds(at)
            cur = {"block_start": rule.iso(start), "block_end": rule.iso(end), "first_timestamp": ts,
                   "last_timestamp": ts, "_sessions": set(), "_models": {}, "api_messages": 0,
                   "input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 0, "total_tokens": 0, "_cost": [], "unpriced_messages": 0,
                   "priced_messages": 0}
            rows.append(cur)
        cur["last_timestamp"] = ts
        cur["_sessions"].add(sid)
        cur["api_messages"] += 1
        cur["input_tokens"] += inp
        cur["output_tokens"] += out
        cur["cache_creation_input_tokens"] += cw
        cur["cache_read_input_tokens"] += cr
        cur["total_tokens"] += total
        m = cur["_models"].setdefault(model, {"model": model, "api_messages": 0, "total_tokens": 0,
                                              "_cost": [], "unpriced_messages": 0, "priced_messages": 0})
        for r in (cur, m):
            if usd is None:
                r["unpriced_messages"] += 1
            else:
                r["_cost"].append(usd)
                r["priced_messages"] += model != "<synthetic>"
        m["api_messages"] += 1
        m["total_tokens"] += total
    for r in rows:
        r["is_active"] = rule.is_active(rule.parse_ts(r["block_end"]), rule.parse_ts(r["last_timestamp"]), now)
    past = [r["total_tokens"] for r in rows if not r["is_active"]]
    limit = (max(past) if past else None) if token_limit == "max" else token_limit
    for r in rows:
        r["sessions"] = len(r.pop("_sessions"))
        models = sorted(r.pop("_models").values(), key=lambda m: -m["total_tokens"])
        r["models"] = ",".join(m["model"] for m in models)
        for m in models:
            c = m.pop("_cost")
            m["cost_usd"] = round(sum(c), 6) if c else None
            _finish(m)
        c = r.pop("_cost")
        r["cost_usd"] = round(sum(c), 6) if c else None
        _finish(r)
        if breakdown:
            r["model_rows"] = models
        last = rule.parse_ts(r["last_timestamp"])
        block_end = rule.parse_ts(r["block_end"])
        if zone is not None:
            r["block_start_local"] = rule.parse_ts(r["block_start"]).astimezone(zone).isoformat()
        if limit:
            r["percent_of_limit"] = round(100.0 * r["total_tokens"] / limit, 1)
        if r["is_active"]:
            first = rule.parse_ts(r["first_timestamp"])
            minutes = (last - first).total_seconds() / 60
            left = max(0.0, (block_end - now).total_seconds() / 60)
            r["minutes_left"] = round(left, 1)
            if minutes > 0:
                per_min = r["total_tokens"] / minutes
                per_hour = (r["cost_usd"] or 0) / minutes * 60
                r["burn_rate"] = {"tokens_per_minute": round(per_min, 1),
                                  "cost_usd_per_hour": round(per_hour, 6) if r["cost_usd"] is not None else None}
                r["projection"] = {"total_tokens": round(r["total_tokens"] + per_min * left),
                                   "cost_usd": round((r["cost_usd"] or 0) + per_hour / 60 * left, 6)
                                   if r["cost_usd"] is not None else None}
                if limit:
                    r["projection"]["percent_of_limit"] = round(100.0 * r["projection"]["total_tokens"] / limit, 1)
            else:
                r["burn_rate"] = r["projection"] = None  # one message: no rate yet
    active = next((r for r in rows if r["is_active"]), None)
    return {"rows": rows, "token_limit": limit, "active_block": active}


def session_cost(conn: sqlite3.Connection, session: str) -> dict:
    """What one session (its subagents included) cost so far: its total."""
    return report(conn, by="day", session=session)["total"]


def today_cost(conn: sqlite3.Connection, tz: str | None = None, now: _dt.datetime | None = None) -> dict:
    """What today (in the zone ``tz``, default UTC) cost so far: its total."""
    zone = _zone(tz)
    day = (now or _dt.datetime.now(_dt.UTC)).astimezone(zone or _dt.UTC).date()
    return report(conn, by="day", since=day, until=day, tz=tz)["total"]
