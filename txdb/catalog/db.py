"""Open the catalog: pragmas, named append-only migrations, views from sql/.

Migrations (``sql/migrations/NNN_name.sql``) run once each, in name order,
and are recorded in ``_txdb_migrations``. Views (``sql/views/NN_name.sql``)
are derived, never migrated: when the view files change they are all
dropped and recreated, so every open sees views matching this code.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

from txdb.catalog import cost
from txdb.catalog import sqlutil
from txdb.model import regular, tokens
from txdb.errors import CatalogError, NoCatalog, QueryError, QueryRefused

# The names its callers use (db.rows, db.transaction, db.like_literal); defined below cost.py.
rows = sqlutil.rows
transaction = sqlutil.transaction
like_literal = sqlutil.like_literal

# Transcripts are private: every file txdb creates is readable by its owner only.
FILE_MODE = 0o600

# SQLite errors that describe the machine, not txdb or the catalog: locked
# by another writer past the busy timeout, a full or read-only disk.
MACHINE_CONDITIONS = ("database is locked", "database or disk is full", "disk I/O error",
                      "attempt to write a readonly database", "unable to open database file")


def _sql_files(folder: str) -> list[tuple[str, str]]:
    """(name, text) of each .sql file of ``sql/<folder>``: the repository's
    top-level sql/ folder, installed as the package ``txdb.sql`` (a folder on
    disk, from a wheel as from an editable install). Read from its folder, not
    through importlib.resources: every command that opens the catalog reads
    them, and importing that machinery was a fifth of a refresh with nothing
    to do."""
    from txdb import sql

    out = []
    with os.scandir(os.path.join(sql.__path__[0], folder)) as entries:
        for entry in entries:
            if entry.name.endswith(".sql"):
                with open(entry.path, encoding="utf-8") as fh:
                    out.append((entry.name, fh.read()))
    return sorted(out)


def migrations() -> list[tuple[str, str]]:
    return [(name[:-4], sql) for name, sql in _sql_files("migrations")]


def view_files() -> list[tuple[str, str]]:
    """The views of sql/views, after ``known_formats`` (made from code)."""
    return [known_formats_view(), model_windows_view()] + [(name[:-4].split("_", 1)[1], sql) for name, sql in _sql_files("views")]


def model_windows_view() -> tuple[str, str]:
    """The view ``model_windows`` (release, release_key, pattern): per known
    Claude Code release, the model families (GLOB patterns) it runs in a 1M
    window, as ``windows.LONG_MODELS`` states them; a release with none has
    one row whose pattern is NULL. ``release_key`` orders releases
    (major * 1e6 + minor * 1e3 + patch)."""
    from txdb.model.windows import LONG_MODELS, release_key

    rows = []
    for rel, pats in sorted(LONG_MODELS.items(), key=lambda kv: release_key(kv[0])):
        a, b, c = (release_key(rel) + (0, 0, 0))[:3]
        key = a * 1_000_000 + b * 1_000 + c
        rows += [f"('{rel}', {key}, '{p}')" for p in pats] or [f"('{rel}', {key}, NULL)"]
    return "model_windows", ("CREATE VIEW model_windows (release, release_key, pattern) AS\nVALUES\n"
                             + ",\n".join(rows) + ";\n")


def known_formats_view() -> tuple[str, str]:
    """The view ``known_formats`` (kind 'line', 'attachment', 'block' or
    'key', name, class): the line types, attachment types, content block
    types and envelope keys txdb knows, as ``records.LINE_TYPES``,
    ``policy.policy_class``, ``records.BLOCK_TYPES`` (GLOB patterns) and
    ``records.ENVELOPE_KEYS`` state them, so SQL reads the one list."""
    from txdb.model.policy import KEEP_ALL, SUPERSEDED, SYSTEM_PROMPT, policy_class
    from txdb.model.records import BLOCK_TYPES, ENVELOPE_KEYS, LINE_TYPES

    def q(v: str) -> str:
        return "'" + v.replace("'", "''") + "'"

    rows = [("line", t, what) for t, what in sorted(LINE_TYPES.items())]
    rows += [("attachment", t, policy_class(t)) for t in sorted(KEEP_ALL | SYSTEM_PROMPT | SUPERSEDED)]
    rows += [("block", t, "block") for t in BLOCK_TYPES]
    rows += [("key", k, "envelope") for k in sorted(ENVELOPE_KEYS)]
    values = ",\n".join(f"({q(a)}, {q(b)}, {q(c)})" for a, b, c in rows)
    return "known_formats", ("CREATE VIEW known_formats (kind, name, class) AS\nVALUES\n" + values + ";\n")


def register_functions(conn: sqlite3.Connection) -> None:
    """SQL access to the token estimates of txdb/model/tokens.py, to a
    record's raw JSON (``txdb_json(file_id, offset)``, txdb/catalog/ingest/chunks.py:
    for ad-hoc queries; no view calls it) and to a block's whole text
    (``txdb_text(file_id, offset, idx)``: a cut block's, for ad-hoc
    queries, search excerpts, show, export and the secrets scan; no view
    calls it)."""
    from txdb.catalog.ingest.chunks import json_function, text_function

    conn.create_function("txdb_json", 2, json_function(conn))
    conn.create_function("txdb_text", 3, text_function(conn))
    conn.create_function(
        "txdb_tokens", 1, lambda s: tokens.text_tokens(s) if isinstance(s, str) else 0, deterministic=True
    )
    conn.create_function(
        "txdb_chars_tokens", 1, lambda n: tokens.text_tokens(int(n or 0)), deterministic=True
    )
    conn.create_function(
        "txdb_image_tokens", 2, lambda w, h: tokens.image_tokens(w, h), deterministic=True
    )


def _pragmas(conn: sqlite3.Connection, busy_timeout_ms: int = 10000) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -65536")


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply the migrations not yet applied; return their names."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _txdb_migrations (name TEXT PRIMARY KEY, applied_at TEXT)"
    )
    done = {r[0] for r in conn.execute("SELECT name FROM _txdb_migrations")}
    applied = []
    todo = [(name, sql) for name, sql in migrations() if name not in done]
    if todo:
        _drop_views(conn)
    for name, sql in todo:
        with transaction(conn):
            for statement in _split(sql):
                conn.execute(statement)
            if name in PYTHON_STEPS:
                PYTHON_STEPS[name](conn)
            conn.execute(
                "INSERT INTO _txdb_migrations VALUES (?, datetime('now'))", (name,)
            )
        applied.append(name)
    return applied


def _compact_archive(conn: sqlite3.Connection) -> None:
    from txdb.catalog.ingest.chunks import upgrade

    upgrade(conn)


def _type_sums(conn: sqlite3.Connection) -> None:
    from txdb.catalog.ingest import type_sums

    type_sums.store_all(conn)


def _smaller_archive(conn: sqlite3.Connection) -> None:
    from txdb.catalog.ingest.chunks import repack

    repack(conn)


def _waste_paid(conn: sqlite3.Connection) -> None:
    from txdb.catalog.ingest import waste_found

    waste_found.migrate(conn)


def _kept_for_pages(conn: sqlite3.Connection) -> None:
    from txdb.catalog.ingest import billed

    billed.migrate(conn)


# Migrations with a step SQL cannot do, run after their SQL in the same
# transaction: 035 compresses the raw lines it took out of records; 039
# sums the files already catalogued; 040 packs raw lines in larger chunks;
# 042 ranks their API messages (its other column is filled once the views
# are back: AFTER_VIEWS); 046 finds their waste (043 made its table, whose
# rows its step found before 046's column; 046 finds them all again, so a
# catalog older than 043 gets them once, from 046).
PYTHON_STEPS = {"035_compact_archive": _compact_archive, "039_type_sums": _type_sums,
                "040_smaller_archive": _smaller_archive, "042_kept_for_pages": _kept_for_pages,
                "046_waste_paid": _waste_paid}


def _long_context(conn: sqlite3.Connection) -> None:
    from txdb.catalog.ingest import window

    window.fill(conn)


# Steps of migrations that read views, which are dropped while migrations
# run: done once they are made again, so a migrated catalog holds what a
# fresh build does (042's sessions.long_context reads usage_context).
AFTER_VIEWS = {"042_kept_for_pages": _long_context}


def after_views(conn: sqlite3.Connection, applied: list[str]) -> None:
    for name in applied:
        if name in AFTER_VIEWS:
            AFTER_VIEWS[name](conn)


def _drop_views(conn: sqlite3.Connection) -> None:
    """Views are derived (``ensure_views`` makes them again after the
    migrations): dropped before a migration runs, so that one may rebuild
    a table they read."""
    views = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")]
    if views:
        with transaction(conn):
            for name in views:
                conn.execute(f'DROP VIEW IF EXISTS "{name}"')


def _split(sql: str) -> list[str]:
    """Split a script into statements (sqlite3.complete_statement decides)."""
    statements, buf = [], []
    for line in sql.splitlines(keepends=True):
        buf.append(line)
        chunk = "".join(buf)
        if sqlite3.complete_statement(chunk):
            if chunk.strip().strip(";").strip():
                statements.append(chunk)
            buf = []
    rest = "".join(buf).strip()
    if rest and not all(ln.strip().startswith("--") for ln in rest.splitlines() if ln.strip()):
        statements.append(rest)
    return statements


def ensure_views(conn: sqlite3.Connection) -> bool:
    """(Re)create the views when their SQL changed; return True if it did."""
    files = view_files()
    digest = hashlib.sha256("\n".join(n + "\0" + s for n, s in files).encode()).hexdigest()
    conn.execute("CREATE TABLE IF NOT EXISTS _txdb_meta (key TEXT PRIMARY KEY, value TEXT)")
    row = conn.execute("SELECT value FROM _txdb_meta WHERE key = 'views_sha'").fetchone()
    existing = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    names = [n for n, _ in files]
    if row and row[0] == digest and all(n in existing for n in names):
        return False
    row = conn.execute("SELECT value FROM _txdb_meta WHERE key = 'views'").fetchone()
    previous = row[0].split(",") if row and row[0] else []
    with transaction(conn):
        for name in reversed(previous + names):
            conn.execute(f'DROP VIEW IF EXISTS "{name}"')
        for name, sql in files:
            conn.execute(sql)
        conn.execute(
            "INSERT OR REPLACE INTO _txdb_meta VALUES ('views_sha', ?), ('views', ?)",
            (digest, ",".join(names)),
        )
    return True


# The row of ``_txdb_meta`` by which migration 026 asked for every estimate
# to be computed again (the older idiom; ``rules.py`` is the current one).
REDERIVE_ESTIMATES = "rederive_estimates"
# The row of ``_txdb_meta`` that records the rules version of the stored figures.
RULES_VERSION_KEY = "rules_version"


def rederive(conn: sqlite3.Connection) -> bool:
    """Bring the stored figures to the current rules (``rules.RULES_VERSION``)
    once: each bump since the version the catalog records marks its files
    to be read again (``UPDATE files SET inode = NULL``) and/or computes every
    session's estimate again from the catalog (as migration 026's
    ``REDERIVE_ESTIMATES`` row asks too), and the new version is recorded,
    in one transaction. One read of ``_txdb_meta`` when nothing is due; the
    estimate's module is imported only when something is. True when it did
    the work (docs/architecture.md, "Schema changes")."""
    from txdb import rules

    def due() -> tuple[int, bool] | None:
        meta = dict(conn.execute("SELECT key, value FROM _txdb_meta WHERE key IN (?, ?)",
                                 (REDERIVE_ESTIMATES, RULES_VERSION_KEY)).fetchall())
        version = int(meta.get(RULES_VERSION_KEY) or 0)
        if version >= rules.RULES_VERSION and REDERIVE_ESTIMATES not in meta:
            return None
        return version, REDERIVE_ESTIMATES in meta

    if due() is None:
        return False
    with transaction(conn):
        now = due()  # another process may have done it since the read above
        if now is None:
            return False
        version, asked = now
        todo = rules.since(version) if conn.execute("SELECT 1 FROM files LIMIT 1").fetchone() else []
        for b in todo:
            if b.reread is not None:
                conn.execute("UPDATE files SET inode = NULL WHERE gone = 0"
                             + (f" AND ({b.reread})" if b.reread else ""))
        if asked or any(b.estimates for b in todo):
            from txdb.catalog.estimate import store_every_estimate

            store_every_estimate(conn)
        conn.execute("DELETE FROM _txdb_meta WHERE key = ?", (REDERIVE_ESTIMATES,))
        conn.execute("INSERT OR REPLACE INTO _txdb_meta (key, value) VALUES (?, ?)",
                     (RULES_VERSION_KEY, str(max(version, rules.RULES_VERSION))))
    return True


def create_private(path: str | Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (then make it 0600).

    Done before SQLite opens a database: SQLite gives the database's
    ``-wal``, ``-shm`` and ``-journal`` files the mode of the database file,
    so they are private too.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    except FileExistsError:
        try:
            os.chmod(path, FILE_MODE)
        except OSError:
            pass  # not ours to change (another user's file): SQLite reports what matters
        return
    os.close(fd)


def _check_is_catalog(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse another program's database: txdb migrates only an empty file
    or one it created (which has ``_txdb_migrations``)."""
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    if names and "_txdb_migrations" not in names:
        raise CatalogError(f"{path} is not a txdb catalog (it holds other tables): name another --db")


def no_catalog(path: str | Path) -> NoCatalog:
    """The error of a reading command whose catalog does not exist: where
    it looked, and the command that makes one there."""
    from txdb.config import default_db_path

    db = "" if Path(path) == default_db_path() else f" --db {path}"
    return NoCatalog(f"no catalog at {path}: run `txdb refresh{db}` first")


def check_side_files(path: Path) -> None:
    """CatalogError when a file SQLite keeps beside the catalog (its journal,
    WAL, WAL index) is not a regular file: SQLite would wait on a FIFO there
    for ever, or write through a link."""
    try:
        regular.check_sqlite_side_files(path)
    except regular.NotRegularFile as e:
        raise CatalogError(f"the catalog's file {e.filename} is {regular.kind(e.mode)}, not a regular file "
                           "(SQLite keeps its journal there): move it away") from None


def connect(path: str | Path, busy_timeout_ms: int = 10000, create: bool = True,
            prices: bool = True) -> sqlite3.Connection:
    """A read-write connection to a migrated catalog with current views;
    a writer waits up to ``busy_timeout_ms`` for another one to finish.

    ``create=False`` (every command that only reads): a catalog that does
    not exist, or an empty file, is ``NoCatalog``, and nothing is created
    (a mistyped ``--db`` must not answer with an empty catalog).
    ``prices=False``: a connection that reads no cost leaves the pricing of
    new models to the next one."""
    path = Path(path)
    if not create and not (path.is_file() and path.stat().st_size > 0):
        raise no_catalog(path)
    check_side_files(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where a folder of the path should be
        raise CatalogError(f"cannot create the catalog {path}: a file is in the way of its folder") from None
    existed = path.exists()
    if not existed:
        create_private(path)
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        _check_is_catalog(conn, path)  # before anything is written to it (WAL mode is)
        if existed:
            create_private(path)  # ours: private (another program's file is left as it is)
        _pragmas(conn, busy_timeout_ms)
        register_functions(conn)
        applied = migrate(conn)
        ensure_views(conn)
        after_views(conn, applied)
        if prices:
            cost.sync_prices(conn)  # the installed price library's figures (txdb/catalog/cost.py)
        rederive(conn)
    except sqlite3.OperationalError as e:
        conn.close()
        if str(e) in MACHINE_CONDITIONS:
            raise  # the machine's state, not the file's: reported as such
        raise CatalogError(f"{path} cannot be used as a txdb catalog: {e}") from None
    except CatalogError:
        conn.close()
        raise
    except sqlite3.DatabaseError as e:  # not a database at all (a text file, a corrupt file)
        conn.close()
        raise CatalogError(f"{path} cannot be used as a txdb catalog: {e}") from None
    return conn


def view_columns(view: str) -> list[str]:
    """The columns of one of txdb's views, as a blank catalog has them (built
    in memory: for help texts, which then cannot drift from the SQL)."""
    conn = sqlite3.connect(":memory:")
    try:
        register_functions(conn)
        migrate(conn)
        ensure_views(conn)
        return [r[1] for r in conn.execute("SELECT * FROM pragma_table_info(?)", (view,))]
    finally:
        conn.close()


def open_db(path: str | Path):
    """The catalog as a sqlite-utils Database, migrated and with views."""
    import sqlite_utils  # only for library users: keeps CLI start-up short

    return sqlite_utils.Database(connect(path))


# What a user's query (`txdb query`, a --where condition) may do: read.
# Everything else is refused by the authorizer, notably ATTACH (which
# creates a file, and which VACUUM INTO runs internally to write a copy of
# the catalog anywhere); the connection is also opened read-only.
_QUERY_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
# PRAGMAs that only describe the schema, with or without an argument ...
_SCHEMA_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
                   "foreign_key_list", "function_list", "module_list", "pragma_list", "collation_list",
                   "database_list", "compile_options"}
# ... and settings that are read when given no value (set when given one).
_SETTING_PRAGMAS = {"page_count", "page_size", "freelist_count", "user_version", "schema_version",
                    "application_id", "encoding", "data_version", "journal_mode"}
_ACTION_NAMES = {getattr(sqlite3, n): n[len("SQLITE_"):].replace("_", " ")
                 for n in dir(sqlite3) if n.startswith("SQLITE_") and n[len("SQLITE_"):] in (
                     "ATTACH", "DETACH", "INSERT", "UPDATE", "DELETE", "CREATE_TABLE", "CREATE_TEMP_TABLE",
                     "CREATE_INDEX", "CREATE_TEMP_INDEX", "CREATE_VIEW", "CREATE_TEMP_VIEW", "CREATE_TRIGGER",
                     "CREATE_TEMP_TRIGGER", "CREATE_VTABLE", "DROP_TABLE", "DROP_TEMP_TABLE", "DROP_INDEX",
                     "DROP_TEMP_INDEX", "DROP_VIEW", "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_TEMP_TRIGGER",
                     "DROP_VTABLE", "ALTER_TABLE", "REINDEX", "ANALYZE", "TRANSACTION", "SAVEPOINT", "PRAGMA")}


class QueryConnection(sqlite3.Connection):
    """A read-only connection that remembers what its authorizer refused
    (``refused``: the first refusal of the statement being run, if any)."""

    refusals: list[str]

    @property
    def refused(self) -> str | None:
        return self.refusals[0] if self.refusals else None


# Functions no query may call: fts3_tokenizer hands out (one argument) and
# replaces (two) a tokenizer's C function pointer, a known way from SQL to
# reading memory and running code.
REFUSED_FUNCTIONS = frozenset({"fts3_tokenizer"})


def refuses_function(action: int, name: str | None) -> bool:
    """Whether an authorizer call is a call of a refused function."""
    return action == sqlite3.SQLITE_FUNCTION and (name or "").lower() in REFUSED_FUNCTIONS


def _query_authorizer(refusals: list[str]):
    def authorize(action, arg1, arg2, _db, _trigger):
        if refuses_function(action, arg2):
            refusals.append(f"{arg2}()")
            return sqlite3.SQLITE_DENY
        if action in _QUERY_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (
                arg1 in _SCHEMA_PRAGMAS or (arg1 in _SETTING_PRAGMAS and arg2 is None)):
            return sqlite3.SQLITE_OK
        # Table-valued pragmas (pragma_table_info(...)) are checked as an
        # update of sqlite_master's columns: nothing is written (the
        # connection is read-only), so they stay usable.
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
            return sqlite3.SQLITE_OK
        name = _ACTION_NAMES.get(action, f"action {action}")
        if action == sqlite3.SQLITE_ATTACH:  # VACUUM runs an ATTACH too
            name = "ATTACH or VACUUM" + (f" (it would write {arg1})" if arg1 else "")
        elif action == sqlite3.SQLITE_PRAGMA:
            name = f"PRAGMA {arg1}" + (f" = {arg2}" if arg2 is not None else "")
        elif action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE) and arg1:
            name = f"{name} on {arg1}"
        refusals.append(name)  # the first one says best what the statement tried
        return sqlite3.SQLITE_DENY

    return authorize


def _let_signals_in() -> int:
    """SQLite calls this every few thousand steps of a statement: running
    Python code lets a Ctrl-C be handled (the statement is then interrupted)
    instead of waiting for a runaway query to end."""
    return 0


def connect_readonly(path: str | Path) -> QueryConnection:
    """A read-only connection for user queries (after ``connect`` migrated it).

    Only reads are authorized: no ATTACH/DETACH, VACUUM (INTO), writes,
    schema changes, transactions or PRAGMAs that set something; run
    statements with ``run_query``.
    """
    check_side_files(Path(path).resolve())
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, factory=QueryConnection)
    conn.execute("PRAGMA busy_timeout = 10000")
    register_functions(conn)
    conn.refusals = []
    conn.set_authorizer(_query_authorizer(conn.refusals))
    conn.set_progress_handler(_let_signals_in, 20_000)
    return conn


def run_query(conn: QueryConnection, sql: str, params=()) -> tuple[list[str], list[tuple]]:
    """Run a user's read-only statement: (column names, rows).

    QueryError for a statement SQLite rejects or the authorizer refuses;
    KeyboardInterrupt when Ctrl-C interrupted it.
    """
    conn.refusals.clear()
    try:
        cur = conn.execute(sql, params)
        columns = [d[0] for d in cur.description] if cur.description else []
        return columns, cur.fetchall()
    except sqlite3.Error as e:
        msg = (str(e).splitlines() or [""])[0] or type(e).__name__
        if msg == "interrupted":
            raise KeyboardInterrupt from None
        if conn.refused:
            raise QueryRefused(f"{conn.refused} is not allowed: queries only read "
                               "(SELECT, WITH, schema PRAGMAs)") from None
        raise QueryError(msg) from None
