"""txdb's Datasette plugin: its hooks and routes. A session page that reads
like the conversation (its figures read by ``txdb.web.session``), links to
it from the session views, and readable JSON and long text cells.

Registered as the ``txdb`` entry point in the ``datasette`` group, so plain
``datasette serve catalog.db`` loads it when txdb is installed. Read-only:
every query goes through Datasette's read connections.

Routes:
    /-/txdb/session/<id>[?db=NAME&start=POS&limit=N]        the conversation (a session id,
                                                             a 4+ character prefix, or a file's number)
    /-/txdb/session/<id>?pos=POS[&limit=N]                   redirects to the window holding chain position POS
    /-/txdb/charts[?db=NAME]                                 tokens and cost by day, largest contexts
    /-/txdb/txdb.css                                         its stylesheet

Charts are SVG drawn here (txdb.web.svg): no script and nothing fetched from
another host, so they render with no network.
"""

from __future__ import annotations

import contextvars
import html
import json
import re
import sqlite3
from importlib import resources
from urllib.parse import parse_qs, urlencode

import markupsafe
from datasette import hookimpl
from datasette.utils.asgi import Response

from txdb.catalog.db import refuses_function
from txdb.catalog.ingest.chunks import json_function, text_function
from txdb.web import charts, front, svg
from txdb.web.session import PAGE_RECORDS, find_session, load_session
from txdb.web.hostcheck import refuse_foreign_hosts
from txdb.web.urls import REF, session_path

# Columns holding JSON text, shown pretty-printed (collapsed when long).
JSON_COLUMNS = {"raw", "json", "iterations", "arguments"}
# Views and tables whose `text` column holds block text (long: excerpted).
TEXT_TABLES = {"blocks", "search_messages", "search_thinking", "search_tool_output", "search_tool_input"}
# Integer columns that hold an amount (not an id or a position), by the end
# of their name: shown with thousands separators on table pages.
MEASURES = ("tokens", "chars", "bytes", "messages", "lines", "length", "markers", "size", "sessions", "count",
            "blocks", "records", "images")

CELL_JSON_CHARS = 4000       # pretty JSON shown inside a collapsed cell on table pages
ROW_JSON_CHARS = 400_000     # ... and on a row page
CELL_TEXT_CHARS = 400        # text excerpt on table pages
ROW_TEXT_CHARS = 400_000

# The request being served, for render_cell (which is not given it on 0.65).
_scope: contextvars.ContextVar = contextvars.ContextVar("txdb_scope", default=None)


def _css() -> str:
    return resources.files("txdb.web").joinpath("static/txdb.css").read_text(encoding="utf-8")


def _template_source(name: str = "txdb_session.html") -> str:
    return resources.files("txdb.web").joinpath(f"templates/{name}").read_text(encoding="utf-8")


async def _render(datasette, name: str, data: dict, request) -> Response:
    cache = datasette.__dict__.setdefault("_txdb_templates", {})
    if name not in cache:
        cache[name] = datasette.jinja_env.from_string(_template_source(name))
    return Response.html(await datasette.render_template(cache[name], data, request=request))


# ---------------------------------------------------------------- hooks


@hookimpl
def asgi_wrapper(datasette):
    def wrap(app):
        guarded = refuse_foreign_hosts(app)

        async def inner(scope, receive, send):
            if scope.get("type") not in ("http", "websocket"):
                return await app(scope, receive, send)
            # A server that holds a txdb catalog answers loopback Host names
            # only (DNS rebinding); other Datasette servers are left alone.
            target = guarded if await _serves_catalog(datasette) else app
            token = _scope.set(scope)
            try:
                await target(scope, receive, send)
            finally:
                _scope.reset(token)

        return inner

    return wrap


async def _is_catalog(db) -> bool:
    return "_txdb_migrations" in await db.table_names()


def _known(datasette) -> dict:
    """Which served databases are txdb catalogs, by name (looked at once each)."""
    return datasette.__dict__.setdefault("_txdb_is_catalog", {})


async def _database_is_catalog(datasette, name: str | None) -> bool | None:
    """True when the served database ``name`` is a txdb catalog; None when
    it cannot be read now (asked again next time)."""
    known = _known(datasette)
    if name in known:
        return known[name]
    db = datasette.databases.get(name) if name else None
    if db is None or db.is_memory:
        return False
    try:
        known[name] = await _is_catalog(db)
    except Exception:
        return None
    return known[name]


async def _serves_catalog(datasette) -> bool:
    """True when any database served is a txdb catalog (or cannot be read
    now: the Host guard then errs on the safe side)."""
    for name in list(datasette.databases):
        if await _database_is_catalog(datasette, name) is not False:
            return True
    return False


# The hooks below act on the pages and cells of txdb catalogs only: beside
# other databases in one Datasette, theirs keep Datasette's own look.


@hookimpl
def extra_css_urls(database, datasette):
    async def urls():
        if database and await _database_is_catalog(datasette, database):
            return [datasette.urls.path("/-/txdb/txdb.css")]
        return []

    return urls


@hookimpl
def database_actions(datasette, database):
    async def links():
        if database and await _database_is_catalog(datasette, database):
            return [{"href": charts_url(datasette, database), "label": "Charts: tokens and cost by day, largest contexts"}]
        return []

    return links


def _refuse_functions(action, _arg1, arg2, _db, _trigger):
    return sqlite3.SQLITE_DENY if refuses_function(action, arg2) else sqlite3.SQLITE_OK


@hookimpl
def prepare_connection(conn):
    # Every served database's connections, as `txdb query`'s: no SQL may
    # reach fts3_tokenizer (txdb.catalog.db.REFUSED_FUNCTIONS). txdb_json(file_id,
    # offset) gives a record's raw JSON to ad-hoc SQL, txdb_text a block's whole text.
    conn.set_authorizer(_refuse_functions)
    conn.create_function("txdb_json", 2, json_function(conn))
    conn.create_function("txdb_text", 3, text_function(conn))


@hookimpl
def startup(datasette):
    # txdb's templates before Datasette's own (after a --template-dir's): its
    # database.html adds the front page to a catalog's database page and
    # extends Datasette's page ("default:database.html").
    from jinja2 import ChoiceLoader, FileSystemLoader

    folder = str(resources.files("txdb.web").joinpath("templates"))
    loader = datasette.jinja_env.loader
    first = loader.loaders[0] if isinstance(loader, ChoiceLoader) and loader.loaders else None
    if isinstance(first, FileSystemLoader):
        if folder not in first.searchpath:
            first.searchpath.insert(1 if datasette.template_dir else 0, folder)
    else:
        datasette.jinja_env.loader = ChoiceLoader([FileSystemLoader(folder), loader])


@hookimpl
def extra_template_vars(template, database, datasette):
    async def front_page():
        if template != "database.html" or not database or not await _database_is_catalog(datasette, database):
            return {}
        db = datasette.get_database(database)
        data = await db.execute_fn(front.load_front)
        data["session_url"] = lambda fid: session_url(datasette, database, fid)
        data["table_url"] = lambda table: datasette.urls.table(database, table)
        data["search_url"] = data["table_url"]
        data["charts_url"] = charts_url(datasette, database)
        data["size"] = front.human_bytes
        return {"txdb_front": data}

    return front_page


@hookimpl
def register_routes():
    return [
        (rf"^/-/txdb/session/(?P<ref>{REF})$", session_page),
        (r"^/-/txdb/charts$", charts_page),
        (r"^/-/txdb/txdb\.css$", css_route),
    ]


@hookimpl
def render_cell(row, value, column, table, database, datasette):
    known = _known(datasette).get(database)
    if known is False:
        return None
    if known is None:  # not looked at yet (the first cell of its first page)
        async def later():
            if await _database_is_catalog(datasette, database):
                return _render_catalog_cell(row, value, column, table, database, datasette)
            return None

        return later
    return _render_catalog_cell(row, value, column, table, database, datasette)


def _render_catalog_cell(row, value, column, table, database, datasette):
    # A table or view's `title` beside its file_id (or `conversation`) links to the session page.
    keys = row.keys() if column == "title" and table else ()
    if ("file_id" in keys or "conversation" in keys) and (value is None or isinstance(value, str)):
        fid = row["file_id"] if "file_id" in keys else row["conversation"]
        if isinstance(fid, dict):  # an expanded foreign key
            fid = fid.get("value")
        if isinstance(fid, int):
            url = session_url(datasette, database, fid)
            label = html.escape(value) if value else '<span class="txdb-untitled">&#9656; conversation</span>'
            return markupsafe.Markup(f'<a href="{html.escape(url)}">{label}</a>')
        return None
    if value is None:
        return None
    if type(value) is int and column.endswith(MEASURES):
        return f"{value:,}"
    if column == "conversation" and isinstance(value, int):
        url = session_url(datasette, database, value)
        return markupsafe.Markup(f'<a class="txdb-conv" href="{html.escape(url)}">&#9656;&nbsp;#{value}</a>')
    if column in JSON_COLUMNS and isinstance(value, str) and value[:1] in "{[":
        return _json_cell(value, _on_row_page())
    if column == "text" and table in TEXT_TABLES and isinstance(value, str):
        keys = row.keys()
        chars = row["chars"] if "chars" in keys else None  # a cut block's whole length (migration 038)
        chars = chars if type(chars) is int else 0
        full, terms = _on_row_page(), _search_terms()
        # A cut block's row page shows its whole text, decoded from its raw line,
        # and so does a search's cell with a word missing from the stored start.
        if (chars > len(value) and {"file_id", "offset", "idx"} <= set(keys)
                and (full or any(not re.search(re.escape(t), value, re.IGNORECASE) for t in terms))):
            where = (row["file_id"], row["offset"], row["idx"])

            async def whole():
                res = await datasette.get_database(database).execute("SELECT txdb_text(?, ?, ?)", where)
                first = res.first()
                return _text_cell((first[0] if first else None) or value, full, terms, chars)

            return whole
        return _text_cell(value, full, terms, chars)
    return None


# ---------------------------------------------------------------- cells


def _on_row_page() -> bool:
    scope = _scope.get()
    if not scope:
        return False
    parts = [p for p in scope.get("path", "").split("/") if p]
    return len(parts) >= 3 and not parts[0].startswith("-")


def _search_terms() -> list[str]:
    scope = _scope.get()
    if not scope:
        return []
    qs = parse_qs(scope.get("query_string", b"").decode("utf-8", "replace"))
    search = " ".join(v for k, vs in qs.items() if k.startswith("_search") for v in vs)
    return [t for t in re.findall(r"\w+", search) if t.upper() not in ("AND", "OR", "NOT", "NEAR")]


def _json_cell(value: str, full: bool):
    try:
        pretty = json.dumps(json.loads(value), indent=2, ensure_ascii=False)
    except RecursionError:
        # Valid JSON nested too deep to show as a tree: its text, cut to
        # size like any other (a table page never carries the whole line).
        pretty = value
    except ValueError:  # not JSON: Datasette shows the text as it is
        return None
    limit = ROW_JSON_CHARS if full else CELL_JSON_CHARS
    shown = pretty[:limit]
    more = ""
    if len(pretty) > limit:
        more = f"\n… {len(pretty) - limit:,} more characters (see the row's .json)"
    body = f'<pre class="txdb-json">{html.escape(shown)}{html.escape(more)}</pre>'
    if full and len(pretty) <= 2000:
        return markupsafe.Markup(body)
    summary = html.escape(value[:90]) + ("…" if len(value) > 90 else "")
    return markupsafe.Markup(
        f'<details class="txdb-json"{" open" if full else ""}><summary><code>{summary}</code> '
        f'<span class="txdb-size">{len(value):,} bytes</span></summary>{body}</details>'
    )


def _mark(text: str, terms: list[str]) -> str:
    escaped = html.escape(text)
    if not terms:
        return escaped
    pattern = re.compile("|".join(re.escape(html.escape(t)) for t in terms), re.IGNORECASE)
    return pattern.sub(lambda m: f"<mark>{m.group(0)}</mark>", escaped)


def _text_cell(value: str, full: bool, terms: list[str], chars: int = 0):
    # A cut block's text is its start: the row's chars is the whole length.
    total = max(len(value), chars)
    if full:
        shown = value[:ROW_TEXT_CHARS]
        more = f"\n… {total - len(shown):,} more characters" if total > len(shown) else ""
        return markupsafe.Markup(f'<div class="txdb-text">{_mark(shown, terms)}{html.escape(more)}</div>')
    if total <= CELL_TEXT_CHARS and not terms:
        return None
    start = 0
    if terms:
        m = re.search("|".join(re.escape(t) for t in terms), value, re.IGNORECASE)
        if m:
            start = max(0, m.start() - CELL_TEXT_CHARS // 3)
    excerpt = value[start:start + CELL_TEXT_CHARS]
    prefix = "… " if start > 0 else ""
    suffix = " …" if start + CELL_TEXT_CHARS < total else ""
    size = f' <span class="txdb-size">{total:,} chars</span>' if total > CELL_TEXT_CHARS else ""
    return markupsafe.Markup(
        f'<div class="txdb-text">{prefix}{_mark(excerpt, terms)}{suffix}{size}</div>'
    )


# ---------------------------------------------------------------- session page


def session_url(datasette, database: str, file_id: int) -> str:
    return datasette.urls.path(session_path(file_id)) + "?" + urlencode({"db": database})


def charts_url(datasette, database: str) -> str:
    return datasette.urls.path("/-/txdb/charts") + "?" + urlencode({"db": database})


async def css_route(request, datasette):
    return Response(_css(), content_type="text/css; charset=utf-8",
                    headers={"Cache-Control": "max-age=300"})


async def _catalog_db(datasette, name: str | None):
    if name:
        try:
            db = datasette.get_database(name)
        except KeyError:
            return None
        return db if not db.is_memory and await _is_catalog(db) else None
    for db_name, db in datasette.databases.items():
        if db_name == "_internal" or db.is_memory:
            continue
        if await _is_catalog(db):
            return db
    return None


def _int_arg(request, name: str, default: int, low: int, high: int) -> int:
    try:
        return max(low, min(high, int(request.args.get(name, default))))
    except ValueError:
        return default


async def session_page(request, datasette):
    ref = request.url_vars["ref"][:200]  # letters, digits, - and _ only (the route)
    db = await _catalog_db(datasette, request.args.get("db"))
    if db is None:
        return Response.html("<h1>No txdb catalog is being served</h1>", status=404)
    file_id, matches = await db.execute_fn(lambda conn: find_session(conn, ref))
    if file_id is None and matches:
        return await _render(datasette, "txdb_session_matches.html", {
            "ref": ref, "matches": matches, "database": db.name, "db_url": datasette.urls.database(db.name),
            "session_url": lambda r: datasette.urls.path(session_path(r)) + "?" + urlencode({"db": db.name}),
        }, request)
    if file_id is None:
        return Response.html(f"<h1>No session {html.escape(ref[:40])} in {html.escape(db.name)}</h1>",
                             status=404)
    start = _int_arg(request, "start", 0, 0, 10**9)
    limit = _int_arg(request, "limit", PAGE_RECORDS, 1, 5000)
    here = datasette.urls.path(session_path(ref)) + "?" + urlencode({"db": db.name})
    if "pos" in request.args:  # the window holding a chain position, scrolled to it
        pos = _int_arg(request, "pos", 0, 0, 10**9)
        return Response.redirect(here + "&" + urlencode({"start": pos - pos % limit, "limit": limit}) + f"#pos-{pos}")
    data = await db.execute_fn(lambda conn: load_session(conn, file_id, start, limit))
    if data is None:
        return Response.html(f"<h1>No session {html.escape(ref[:40])} in {html.escape(db.name)}</h1>", status=404)
    data["database"] = db.name
    data["db_url"] = datasette.urls.database(db.name)
    data["row_url"] = lambda table, *pk: datasette.urls.row(db.name, table, ",".join(str(p) for p in pk))
    data["table_url"] = lambda table, **args: datasette.urls.table(db.name, table) + (
        "?" + urlencode(args) if args else "")
    data["page_url"] = lambda s: here + "&" + urlencode({"start": s, "limit": limit})
    context = data.pop("context")
    data["context_chart"] = markupsafe.Markup(svg.context_over_chain(context)) if context else None
    data["compactions"] = len(context["compactions"]) if context else 0
    data["charts_url"] = charts_url(datasette, db.name)
    return await _render(datasette, "txdb_session.html", data, request)


async def charts_page(request, datasette):
    db = await _catalog_db(datasette, request.args.get("db"))
    if db is None:
        return Response.html("<h1>No txdb catalog is being served</h1>", status=404)

    def read(conn):
        return charts.tokens_by_day(conn), charts.largest_contexts(conn)

    days, largest = await db.execute_fn(read)
    data = {
        "database": db.name,
        "db_url": datasette.urls.database(db.name),
        "days": days,
        "largest": largest,
        "kinds": charts.TOKEN_KINDS,
        "limit": charts.CONTEXT_LIMIT,
        "by_day_chart": markupsafe.Markup(svg.tokens_by_day(days, charts.DAY_ROWS)),
        "largest_chart": markupsafe.Markup(svg.largest_contexts(
            largest, charts.CONTEXT_LIMIT, lambda fid: session_url(datasette, db.name, fid))),
    }
    return await _render(datasette, "txdb_charts.html", data, request)
