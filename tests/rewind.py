"""Turn a catalog back into the schema it had before a migration, so a test
can check what that migration (and every later one) does to real rows.

Each later migration is undone from its own SQL: an added column is
dropped, a created table or index is dropped, and its row in
``_txdb_migrations`` is deleted; views and ``_txdb_meta`` are cleared (they
are rebuilt at open). Data a migration rewrote is left as it is: the test
sets the figures it needs. A new migration needs no edit here, unless it rebuilds a table (035, which
moved the raw lines out of ``records``, and 038, which cut long texts and
remade the full-text index, 039, which rebuilt an index, 040, which cut
texts shorter, 042 and 046, whose triggers name their columns, and 044, whose
partial index replaced a whole one, are undone by their own functions:
``UNDO``).
"""

from __future__ import annotations

import re
import sqlite3

from txdb.catalog import db

_ADD_COLUMN = re.compile(r"ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)", re.I)
_CREATE_TABLE = re.compile(r"CREATE\s+(?:VIRTUAL\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)
_COMMENT = re.compile(r"--[^\n]*")
_CREATE_INDEX = re.compile(r"CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)


def rewind(conn: sqlite3.Connection, before: str) -> list[str]:
    """Undo every applied migration whose name sorts at or after ``before``
    (a prefix such as ``"013"``); return their names, latest first."""
    for (v,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        conn.execute(f'DROP VIEW "{v}"')  # first: a view naming a column would stop its drop
    conn.execute("DELETE FROM _txdb_meta")
    applied = {r[0] for r in conn.execute("SELECT name FROM _txdb_migrations")}
    undone = []
    for name, sql in reversed(db.migrations()):
        if name < before or name not in applied:
            continue
        if name in UNDO:
            UNDO[name](conn)
            conn.execute("DELETE FROM _txdb_migrations WHERE name = ?", (name,))
            undone.append(name)
            continue
        statements = [_COMMENT.sub("", s).strip() for s in db._split(sql)]
        for s in statements:
            if m := _CREATE_INDEX.match(s):
                conn.execute(f'DROP INDEX IF EXISTS "{m[1]}"')
        for s in statements:
            if m := _ADD_COLUMN.match(s):
                for (index,) in conn.execute("SELECT name FROM pragma_index_list(?) WHERE origin = 'c'", (m[1],)) \
                        .fetchall():
                    cols = {r[0] for r in conn.execute("SELECT name FROM pragma_index_info(?)", (index,))}
                    if m[2] in cols:
                        conn.execute(f'DROP INDEX "{index}"')
                conn.execute(f'ALTER TABLE "{m[1]}" DROP COLUMN "{m[2]}"')
        for s in reversed(statements):
            if (m := _CREATE_TABLE.match(s)) and not m[1].startswith("_txdb"):
                conn.execute(f'DROP TABLE IF EXISTS "{m[1]}"')
        conn.execute("DELETE FROM _txdb_migrations WHERE name = ?", (name,))
        undone.append(name)
    return undone


COMPACT_ARCHIVE = "035_compact_archive"
_OLD_COLUMNS = ("file_id, offset, length, line, session_id, type, subtype, uuid, parent_uuid, logical_parent_uuid, "
                "leaf_uuid, timestamp, is_sidechain, is_meta, role, model, message_id, request_id, tokens")


def _undo_compact_archive(conn: sqlite3.Connection) -> None:
    """``records`` as migrations 001-034 left it: its raw lines back in
    ``raw`` (from raw_chunks, dropped), the generated ``json`` and the
    indexes of 001, 006 and 021."""
    from txdb.catalog.ingest.chunks import raw_lines

    sql = next(s for n, s in db.migrations() if n.startswith("001_"))
    create = next(st for st in db._split(sql) if "CREATE TABLE records" in st)
    conn.execute(create.replace("CREATE TABLE records", "CREATE TABLE _old_records"))
    fids = [r[0] for r in conn.execute("SELECT DISTINCT file_id FROM records")]
    for fid in fids:
        raws = dict(raw_lines(conn, fid))
        rows = conn.execute(f"SELECT {_OLD_COLUMNS} FROM records WHERE file_id = ? ORDER BY offset", (fid,)).fetchall()
        conn.executemany(f"INSERT INTO _old_records ({_OLD_COLUMNS}, raw) VALUES ({', '.join('?' * 20)})",
                         [(*r, raws.get(r[1], b"").decode("utf-8", "replace")) for r in rows])
    conn.execute("DROP TABLE records")
    conn.execute("DROP TABLE raw_chunks")
    conn.execute("PRAGMA legacy_alter_table = ON")
    conn.execute("ALTER TABLE _old_records RENAME TO records")
    conn.execute("PRAGMA legacy_alter_table = OFF")
    for st in ("CREATE INDEX records_file_line ON records(file_id, line)",
               "CREATE INDEX records_file_uuid ON records(file_id, uuid)",
               "CREATE INDEX records_type ON records(type, subtype)",
               "CREATE INDEX records_session ON records(session_id)",
               "CREATE INDEX records_roots ON records(file_id, offset) WHERE uuid IS NOT NULL AND parent_uuid IS NULL",
               "CREATE INDEX records_sizes ON records(file_id, offset, type, tokens, session_id)",
               "ALTER TABLE records ADD COLUMN json TEXT GENERATED ALWAYS AS "
               "(CASE WHEN json_valid(raw) THEN raw END) VIRTUAL"):
        conn.execute(st)


TEXT_ONCE = "038_text_once"


def _undo_text_once(conn: sqlite3.Connection) -> None:
    """``blocks`` and ``blocks_fts`` as before 038: every cut text whole
    again (decoded from raw_chunks), no ``cut`` column, the full-text index
    over ``blocks.text``, the three indexes it dropped."""
    from txdb.catalog.ingest.chunks import text_function

    conn.create_function("txdb_text", 3, text_function(conn))
    conn.execute("UPDATE blocks SET text = coalesce(txdb_text(file_id, offset, idx), text) WHERE cut = 1")
    conn.execute("ALTER TABLE blocks DROP COLUMN cut")
    conn.execute("DROP TABLE blocks_fts")
    conn.execute('CREATE VIRTUAL TABLE blocks_fts USING fts5(text, content="blocks", content_rowid="rowid")')
    conn.execute("INSERT INTO blocks_fts (blocks_fts) VALUES ('rebuild')")
    conn.execute("CREATE INDEX records_session ON records(session_id)")
    conn.execute("CREATE INDEX blocks_kind ON blocks(kind, tool_name)")
    conn.execute("CREATE INDEX usage_session ON usage(session_id)")


TYPE_SUMS = "039_type_sums"


def _undo_type_sums(conn: sqlite3.Connection) -> None:
    """As before 039: no type_sums, no records_forked, and blocks_sizes as
    021 made it (039 widened it into a covering index)."""
    conn.execute("DROP TABLE type_sums")
    conn.execute("DROP INDEX records_forked")
    conn.execute("DROP INDEX blocks_sizes")
    conn.execute("CREATE INDEX blocks_sizes ON blocks(file_id, offset, tokens)")


SMALLER_ARCHIVE = "040_smaller_archive"


def _undo_smaller_archive(conn: sqlite3.Connection) -> None:
    """As before 040: a cut text keeps its first 2001 characters again (one
    no longer than that is whole, not cut). The chunks stay as 040 packed
    them: any size is read alike."""
    from txdb.catalog.ingest.chunks import text_function

    whole = text_function(conn)
    for rowid, fid, offset, idx in conn.execute("SELECT rowid, file_id, offset, idx FROM blocks WHERE cut = 1") \
            .fetchall():
        text = whole(fid, offset, idx)
        if text is not None:
            conn.execute("UPDATE blocks SET text = ?, cut = ? WHERE rowid = ?",
                         (text[:2001], 1 if len(text) > 2001 else None, rowid))


KEPT_FOR_PAGES = "042_kept_for_pages"


def _undo_kept_for_pages(conn: sqlite3.Connection) -> None:
    """As before 042: no triggers keeping usage.billed, neither column, no
    blocks_tool_pairs."""
    conn.execute("DROP TRIGGER usage_billed_deleted")
    conn.execute("DROP TRIGGER files_billed_moved")
    conn.execute("ALTER TABLE usage DROP COLUMN billed")
    conn.execute("ALTER TABLE sessions DROP COLUMN long_context")
    conn.execute("DROP INDEX blocks_tool_pairs")


SLIMMER_CATALOG = "044_slimmer_catalog"


def _undo_slimmer_catalog(conn: sqlite3.Connection) -> None:
    """As before 044: records_type whole, records_file_line and
    blocks_file_tool_use_id back, gauge_iterations stored whole."""
    for st in ("DROP INDEX records_type",
               "CREATE INDEX records_type ON records(type, subtype)",
               "CREATE INDEX records_file_line ON records(file_id, line)",
               "CREATE INDEX blocks_file_tool_use_id ON blocks(file_id, tool_use_id)",
               "UPDATE usage SET gauge_iterations = nullif(coalesce(gauge_iterations, iterations), 'null')"):
        conn.execute(st)


WASTE_PAID = "046_waste_paid"


def _undo_waste_paid(conn: sqlite3.Connection) -> None:
    """As before 046: no trigger keeping waste_found.paid_turns, no column."""
    conn.execute("DROP TRIGGER usage_billed_waste")
    conn.execute("ALTER TABLE waste_found DROP COLUMN paid_turns")


UNDO = {COMPACT_ARCHIVE: _undo_compact_archive, TEXT_ONCE: _undo_text_once, TYPE_SUMS: _undo_type_sums,
        SMALLER_ARCHIVE: _undo_smaller_archive, KEPT_FOR_PAGES: _undo_kept_for_pages,
        SLIMMER_CATALOG: _undo_slimmer_catalog, WASTE_PAID: _undo_waste_paid}
