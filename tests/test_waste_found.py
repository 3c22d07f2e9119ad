"""waste_found (migration 043), which waste_items and waste price: after
every change a catalog sees (a grown file, a surgery applied, undo,
restore, prune) its rows are what a fresh build of the same files stores,
what finding each file's waste again gives, and what the target views the
reclaim commands select from (block_targets, repeated_reads,
attachment_targets) and the file's API turns name."""

from __future__ import annotations

import shutil
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest

from conftest import DATA, copy_fixture_sessions, run
from txdb.catalog import db
from txdb.catalog.ingest import waste_found
from txdb.catalog.ingest.store import refresh

COLS = "w.kind, w.pos, w.line, w.item, w.detail, w.tokens, w.resent_turns, w.paid_turns"

# The items as the target views name them (the rules waste_items states).
FROM_VIEWS = """
SELECT 'large_result', b.file_id, b.pos, b.line, b.tool_use_id, b.tool_name, b.tokens
FROM block_targets b
WHERE b.kind = 'tool_result' AND b.on_chain = 1 AND b.tokens >= 5000
  AND b.tool_use_id NOT IN (SELECT tool_use_id FROM repeated_reads r WHERE r.file_id = b.file_id)
UNION ALL
SELECT 'repeated_read', file_id, pos, line, tool_use_id, file_path, tokens FROM repeated_reads
UNION ALL
SELECT 'reminder', file_id, pos, line, CAST(offset AS TEXT), type, tokens FROM attachment_targets
WHERE on_chain = 1 AND policy_keeps = 0 AND tokens > 0
"""
TURNS = """
SELECT c.file_id, c.pos, u.timestamp, coalesce(u.cache_creation_input_tokens, 0),
       coalesce(u.cache_read_input_tokens, 0), u.billed
FROM usage u JOIN chain c ON c.file_id = u.file_id AND c.offset = u.offset
WHERE u.in_file = 1 ORDER BY c.file_id, c.pos
"""


def _expected(conn: sqlite3.Connection) -> list[tuple]:
    turns: dict[int, list[tuple]] = {}
    for fid, pos, ts, created, read, billed in conn.execute(TURNS):
        turns.setdefault(fid, []).append((pos, ts, created, read, billed))
    # paid: the turns whose API message counts in this file (usage.billed)
    out = [(kind, fid, pos, line, item, detail, tokens, sum(1 for t in turns.get(fid, []) if t[0] > pos),
            sum(t[4] for t in turns.get(fid, []) if t[0] > pos))
           for kind, fid, pos, line, item, detail, tokens in conn.execute(FROM_VIEWS)]
    for fid, ts in turns.items():  # a turn after more than 5 minutes idle that wrote the cache again
        for (_, t0, *_), (pos, t1, created, read, billed) in zip(ts, ts[1:]):
            idle = (datetime.fromisoformat(t1.replace("Z", "+00:00"))
                    - datetime.fromisoformat(t0.replace("Z", "+00:00"))).total_seconds() / 60
            if idle > 5 and created > read:
                out.append(("cache_rebuild", fid, pos, None, t1, f"{idle:.0f} min idle", created, 1, billed))
    return sorted(out, key=repr)


def _stored(conn: sqlite3.Connection) -> list[tuple]:
    return sorted(conn.execute("SELECT kind, file_id, pos, line, item, detail, tokens, resent_turns, paid_turns "
                               "FROM waste_found").fetchall(), key=repr)


def _found_again(conn: sqlite3.Connection) -> list[tuple]:
    out = []
    for (fid,) in conn.execute("SELECT id FROM files").fetchall():
        out += [(r[1], r[0], *r[2:]) for r in conn.execute(waste_found.FOUND_SELECT, (fid,))]
    return sorted(out, key=repr)


def _by_path(conn: sqlite3.Connection) -> list[tuple]:
    return sorted(conn.execute(f"SELECT f.path, {COLS} FROM waste_found w JOIN files f ON f.id = w.file_id "
                               "WHERE f.gone = 0").fetchall(), key=repr)


def _projects(root: Path) -> Path:
    """The shipped sessions with the generated ones, which hold every kind of waste."""
    copy_fixture_sessions(root)
    for d in (DATA / "generated").iterdir():
        if d.is_dir():
            shutil.copytree(d, root / d.name)
    return root


@pytest.fixture
def catalog(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    projects = _projects(tmp_path / "claude" / "projects")
    conn = db.connect(tmp_path / "scan.db")
    refresh(conn, [projects])
    # the session with the most waste, cut in half: its second half comes as a grown file
    (path,) = conn.execute("SELECT f.path FROM waste_found w JOIN files f ON f.id = w.file_id "
                           "GROUP BY w.file_id ORDER BY count(*) DESC LIMIT 1").fetchone()
    conn.close()
    big = Path(path)
    whole = big.read_bytes()
    cut = whole.index(b"\n", len(whole) // 2) + 1
    big.write_bytes(whole[:cut])
    others = sorted((p for p in projects.glob("*/*.jsonl") if p != big), key=lambda p: -p.stat().st_size)
    run("refresh", "--root", projects, ok=True)
    return tmp_path, projects, big, whole[cut:], others


def _check(tmp_path: Path, projects: Path, name: str) -> None:
    conn = db.connect(tmp_path / "catalog.db")
    try:
        stored = _stored(conn)
        assert {r[0] for r in stored} == {"large_result", "repeated_read", "reminder", "cache_rebuild"}, name
        assert stored == _found_again(conn), name
        assert stored == _expected(conn), name
        fresh = db.connect(tmp_path / f"fresh-{name}.db")
        refresh(fresh, [projects])
        assert _by_path(conn) == _by_path(fresh), name
        fresh.close()
    finally:
        conn.close()


def test_stored_waste_equals_the_target_views_and_a_fresh_build_after_every_change(catalog):
    tmp_path, projects, big, rest, others = catalog
    _check(tmp_path, projects, "first")
    conn = db.connect(tmp_path / "catalog.db")
    before = conn.execute("SELECT count(*) FROM waste_found w JOIN files f ON f.id = w.file_id "
                          "WHERE f.path = ?", (str(big),)).fetchone()[0]
    conn.close()
    with big.open("ab") as fh:  # grown: read from its cursor
        fh.write(rest)
    assert "1 grown" in run("refresh", "--root", projects, ok=True).output
    _check(tmp_path, projects, "grown")
    conn = db.connect(tmp_path / "catalog.db")
    after = conn.execute("SELECT count(*) FROM waste_found w JOIN files f ON f.id = w.file_id "
                         "WHERE f.path = ?", (str(big),)).fetchone()[0]
    conn.close()
    assert after > before  # the second half's waste was found, and the first half's turns recounted
    run("strip-all", big, ok=True)
    run("apply", big, ok=True)
    _check(tmp_path, projects, "surgery")
    run("undo", big, ok=True)
    _check(tmp_path, projects, "undo")
    conn = db.connect(tmp_path / "catalog.db")
    with_waste = {r[0] for r in conn.execute("SELECT f.path FROM waste_found w JOIN files f ON f.id = w.file_id")}
    conn.close()
    gone, pruned = [p for p in others if str(p) in with_waste][:2]
    gone.unlink()
    pruned.unlink()
    run("refresh", "--root", projects, ok=True)
    conn = db.connect(tmp_path / "catalog.db")
    pruned_id = conn.execute("SELECT id FROM files WHERE path = ?", (str(pruned),)).fetchone()[0]
    assert conn.execute("SELECT count(*) FROM waste_found WHERE file_id = ?", (pruned_id,)).fetchone()[0]
    conn.close()
    run("restore", gone.stem, ok=True)
    assert gone.exists()
    _check(tmp_path, projects, "restore")
    run("prune", "--all-gone", "--yes", ok=True)
    conn = db.connect(tmp_path / "catalog.db")
    assert conn.execute("SELECT count(*) FROM waste_found WHERE file_id = ?", (pruned_id,)).fetchone()[0] == 0
    conn.close()
    _check(tmp_path, projects, "prune")


@pytest.mark.parametrize("before", ["043_waste_found", "046_waste_paid"])
def test_migration_finds_the_waste_of_a_catalog_refreshed_before_it(tmp_path, before):
    """A catalog made before 043 (no waste_found) or before 046 (no
    paid_turns) gets the same rows, and the same priced waste, from 046's
    step; its trigger then keeps paid_turns as refresh does."""
    projects = _projects(tmp_path / "projects")
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [projects])
    stored = _stored(conn)
    priced = sorted(conn.execute("SELECT * FROM waste_items").fetchall(), key=repr)
    assert stored and priced and len(priced) <= len(stored)
    conn.execute("DELETE FROM _txdb_migrations WHERE name IN ('043_waste_found', '046_waste_paid')")
    conn.execute("DROP TRIGGER usage_billed_waste")
    conn.execute("DROP TABLE waste_found")
    if before == "046_waste_paid":  # 043's table, with rows found before paid_turns
        conn.execute("INSERT INTO _txdb_migrations VALUES ('043_waste_found', datetime('now'))")
        conn.executescript(dict(db.migrations())["043_waste_found"])
        conn.execute("INSERT INTO waste_found VALUES ((SELECT min(id) FROM files), 'stale', 0, 0, 0, 0, 0, 0)")
    conn.close()
    conn = db.connect(tmp_path / "c.db")
    assert _stored(conn) == stored
    assert sorted(conn.execute("SELECT * FROM waste_items").fetchall(), key=repr) == priced
    # a copy of a session refreshed after: the trigger moves its turns as a fresh catalog's does
    (path,) = conn.execute("SELECT f.path FROM waste_found w JOIN files f ON f.id = w.file_id "
                           "WHERE f.kind = 'session' GROUP BY w.file_id ORDER BY count(*) DESC LIMIT 1").fetchone()
    copy = projects / "-aaa-first" / Path(path).name  # sorts first: it owns the repeated messages
    copy.parent.mkdir()
    shutil.copyfile(path, copy)
    refresh(conn, [projects])
    assert _stored(conn) == _expected(conn) == _found_again(conn)
    paid = dict(conn.execute("SELECT f.path, sum(w.paid_turns) FROM waste_found w JOIN files f ON f.id = w.file_id "
                             "WHERE f.path IN (?, ?) GROUP BY 1", (path, str(copy))).fetchall())
    assert paid[path] == 0 and paid[str(copy)] > 0
    conn.close()


def test_a_new_price_reaches_the_waste_without_a_refresh(tmp_path):
    """The stored rows are unpriced: the views price them when read."""
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [_projects(tmp_path / "projects")])
    (model, n, usd) = conn.execute(
        "SELECT s.model, count(*), sum(w.usd) FROM waste_items w JOIN sessions s ON s.file_id = w.file_id "
        "WHERE w.kind <> 'cache_rebuild' AND w.usd > 0 GROUP BY s.model ORDER BY 3 DESC LIMIT 1").fetchone()
    with db.transaction(conn):
        conn.execute("UPDATE prices SET cache_read_mtok = cache_read_mtok * 2 WHERE model = ?", (model,))
    (usd2,) = conn.execute(
        "SELECT sum(w.usd) FROM waste_items w JOIN sessions s ON s.file_id = w.file_id "
        "WHERE w.kind <> 'cache_rebuild' AND w.usd > 0 AND s.model = ?", (model,)).fetchone()
    assert usd2 == pytest.approx(2 * usd, rel=1e-4)
    conn.close()
