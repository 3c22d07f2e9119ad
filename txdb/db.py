"""Open the catalog: pragmas, named append-only migrations, views from sql/.

Migrations (``sql/migrations/NNN_name.sql``) run once each, in name order,
and are recorded in ``_txdb_migrations``. Views (``sql/views/NN_name.sql``)
are derived, never migrated: when the view files change they are all
dropped and recreated, so every open sees views matching this code.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from pathlib import Path

from . import sql as _sql_package
from . import tokens

SQL_DIR = Path(_sql_package.__file__).parent  # the sql/ folder, installed as txdb.sql


def _sql_files(folder: str) -> list[tuple[str, str]]:
    out = []
    for entry in (SQL_DIR / folder).iterdir():
        if entry.name.endswith(".sql"):
            out.append((entry.name, entry.read_text(encoding="utf-8")))
    return sorted(out)


def migrations() -> list[tuple[str, str]]:
    return [(name[:-4], sql) for name, sql in _sql_files("migrations")]


def view_files() -> list[tuple[str, str]]:
    return [(name[:-4].split("_", 1)[1], sql) for name, sql in _sql_files("views")]


def register_functions(conn: sqlite3.Connection) -> None:
    """SQL access to the token estimates of txdb/tokens.py."""
    conn.create_function(
        "txdb_tokens", 1, lambda s: tokens.text_tokens(len(s)) if s else 0, deterministic=True
    )
    conn.create_function(
        "txdb_chars_tokens", 1, lambda n: tokens.text_tokens(int(n or 0)), deterministic=True
    )
    conn.create_function(
        "txdb_image_tokens", 2, lambda w, h: tokens.image_tokens(w, h), deterministic=True
    )


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection):
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _pragmas(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA busy_timeout = 10000")
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
    for name, sql in migrations():
        if name in done:
            continue
        with transaction(conn):
            for statement in _split(sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO _txdb_migrations VALUES (?, datetime('now'))", (name,)
            )
        applied.append(name)
    return applied


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
    if rest and not all(l.strip().startswith("--") for l in rest.splitlines() if l.strip()):
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


def connect(path: str | Path) -> sqlite3.Connection:
    """A read-write connection to a migrated catalog with current views."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    _pragmas(conn)
    register_functions(conn)
    migrate(conn)
    ensure_views(conn)
    try:
        path.chmod(0o600)
    except OSError:
        pass
    return conn


def open_db(path: str | Path):
    """The catalog as a sqlite-utils Database, migrated and with views."""
    import sqlite_utils  # only for library users: keeps CLI start-up short

    return sqlite_utils.Database(connect(path))


def connect_readonly(path: str | Path) -> sqlite3.Connection:
    """A read-only connection for user queries (after ``connect`` migrated it)."""
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 10000")
    register_functions(conn)
    return conn
