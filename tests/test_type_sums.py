"""type_sums (migration 039), which analyze_by_type and context_by_category
read: after every change a catalog sees (a grown file, a surgery applied,
undo, restore, prune) its rows are what a fresh build of the same files
stores and what summing each file's chain again gives."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import copy_fixture_sessions, run
from txdb.catalog import db
from txdb.catalog.ingest import type_sums
from txdb.catalog.ingest.store import refresh

COLS = "category, items, chars, signature_chars, tokens"


def _by_path(conn: sqlite3.Connection) -> list[tuple]:
    return sorted(conn.execute(f"SELECT f.path, {COLS} FROM analyze_by_type a JOIN files f ON f.id = a.file_id "
                               "WHERE f.gone = 0").fetchall(), key=repr)


def _summed_again(conn: sqlite3.Connection) -> list[tuple]:
    out = []
    for (fid,) in conn.execute("SELECT id FROM files").fetchall():
        out += [(fid, *r[2:]) for r in conn.execute(type_sums.SUMS_SELECT, (fid,))]
    return sorted(out, key=repr)


def _stored(conn: sqlite3.Connection) -> list[tuple]:
    return sorted(conn.execute(f"SELECT file_id, {COLS} FROM analyze_by_type").fetchall(), key=repr)


@pytest.fixture
def catalog(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    projects = copy_fixture_sessions(tmp_path / "claude" / "projects")
    sessions = sorted((p for p in projects.glob("*/*.jsonl")), key=lambda p: -p.stat().st_size)
    # the largest session, cut in half: its second half comes as a grown file
    big = sessions[0]
    whole = big.read_bytes()
    cut = whole.index(b"\n", len(whole) // 2) + 1
    big.write_bytes(whole[:cut])
    run("refresh", "--root", projects, ok=True)
    return tmp_path, projects, big, whole[cut:], sessions[1:]


def _check(tmp_path: Path, projects: Path, name: str) -> None:
    conn = db.connect(tmp_path / "catalog.db")
    try:
        assert _stored(conn) == _summed_again(conn), name
        fresh = db.connect(tmp_path / f"fresh-{name}.db")
        refresh(fresh, [projects])
        assert _by_path(conn) == _by_path(fresh), name
        assert _by_path(conn), name
        fresh.close()
    finally:
        conn.close()


def test_stored_sums_equal_a_fresh_build_after_every_change(catalog):
    tmp_path, projects, big, rest, others = catalog
    _check(tmp_path, projects, "first")
    with big.open("ab") as fh:  # grown: read from its cursor
        fh.write(rest)
    assert "1 grown" in run("refresh", "--root", projects, ok=True).output
    _check(tmp_path, projects, "grown")
    run("strip-all", big, ok=True)
    run("apply", big, ok=True)
    _check(tmp_path, projects, "surgery")
    run("undo", big, ok=True)
    _check(tmp_path, projects, "undo")
    gone, pruned = others[0], others[1]
    gone.unlink()
    pruned.unlink()
    run("refresh", "--root", projects, ok=True)
    conn = db.connect(tmp_path / "catalog.db")
    pruned_id = conn.execute("SELECT id FROM files WHERE path = ?", (str(pruned),)).fetchone()[0]
    assert conn.execute("SELECT count(*) FROM type_sums WHERE file_id = ?", (pruned_id,)).fetchone()[0]
    conn.close()
    run("restore", gone.stem, ok=True)
    assert gone.exists()
    _check(tmp_path, projects, "restore")
    run("prune", "--all-gone", "--yes", ok=True)
    conn = db.connect(tmp_path / "catalog.db")
    assert conn.execute("SELECT count(*) FROM type_sums WHERE file_id = ?", (pruned_id,)).fetchone()[0] == 0
    conn.close()
    _check(tmp_path, projects, "prune")


def test_migration_sums_a_catalog_refreshed_before_it(tmp_path):
    """A catalog made before 039 gets the same sums from the migration's step."""
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [copy_fixture_sessions(tmp_path / "projects")])
    stored = _stored(conn)
    assert stored
    conn.execute("DELETE FROM type_sums")
    conn.execute("DELETE FROM _txdb_migrations WHERE name = '039_type_sums'")
    conn.execute("DROP INDEX records_forked")
    conn.execute("DROP TABLE type_sums")
    conn.close()
    conn = db.connect(tmp_path / "c.db")
    assert _stored(conn) == stored
    conn.close()
