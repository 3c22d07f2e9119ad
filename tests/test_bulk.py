"""A new catalog is built in bulk, and new files are parsed by a worker
process: both must give exactly the catalog the plain incremental refresh
gives, full-text index included, and never leave a half-built catalog."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from txdb import db
from txdb.errors import TxdbError
from txdb.ingest import bulk, fts, rows, store, worker

from conftest import copy_fixture_sessions, fail_nth_write

needs_worker = pytest.mark.skipif(not worker.available(), reason="the parse worker needs fork on Linux")

# Every table refresh fills, with the columns that do not depend on where
# or when the catalog was built.
TABLES = {
    "records": "*",
    "blocks": "*",
    "attachments": "*",
    "usage": "*",
    "chain": "*",
    "parse_errors": "*",
    "dangling_parents": "*",
    "sessions": "*",
    "files": "id, path, project, kind, session_id, size, mtime_ns, inode, head_sha, tail_sha, cursor, lines, gone",
}


def build_plain(path: Path, roots: list[Path]) -> None:
    conn = db.connect(path)
    store.refresh(conn, roots, parallel=False)
    conn.close()


def assert_same_catalog(a: Path, b: Path, same_files: bool = True) -> None:
    """``same_files``: both catalogs read the same files (paths, inodes and
    mtimes agree), rather than copies of them."""
    conn = sqlite3.connect(a)
    conn.execute("ATTACH DATABASE ? AS other", (str(b),))
    tables = dict(TABLES)
    if not same_files:
        tables["files"] = "id, project, kind, session_id, size, head_sha, tail_sha, cursor, lines, gone"
    for table, cols in tables.items():
        n = conn.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0]
        assert n == conn.execute(f"SELECT count(*) FROM other.{table}").fetchone()[0], table
        for x, y in (("main", "other"), ("other", "main")):
            diff = conn.execute(
                f"SELECT count(*) FROM (SELECT {cols} FROM {x}.{table} EXCEPT SELECT {cols} FROM {y}.{table})"
            ).fetchone()[0]
            assert diff == 0, f"{table}: {diff} rows of {x} not in {y}"
    # The block rowids key the full-text index: they must agree too.
    assert conn.execute(
        "SELECT count(*) FROM main.blocks m JOIN other.blocks o USING (file_id, offset, idx) "
        "WHERE m.rowid <> o.rowid").fetchone()[0] == 0
    # The full-text index: the same terms at the same places of the same rows.
    conn.execute("CREATE VIRTUAL TABLE temp.vocab_a USING fts5vocab(main, blocks_fts, instance)")
    conn.execute("CREATE VIRTUAL TABLE temp.vocab_b USING fts5vocab(other, blocks_fts, instance)")
    for x, y in (("vocab_a", "vocab_b"), ("vocab_b", "vocab_a")):
        assert conn.execute(f"SELECT count(*) FROM (SELECT * FROM {x} EXCEPT SELECT * FROM {y})").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM vocab_a").fetchone()[0] > 1000
    conn.close()


def assert_sound(path: Path) -> None:
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.execute("INSERT INTO blocks_fts(blocks_fts) VALUES ('integrity-check')")
    assert conn.execute("SELECT count(*) FROM _blocks_fts_pending").fetchone()[0] == 0
    triggers = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert {"blocks_fts_ai", "blocks_fts_bi", "blocks_fts_ad", "blocks_fts_au", "blocks_fts_flush"} <= triggers
    conn.close()
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".building-" in p.name)


@needs_worker
@pytest.mark.parametrize("parallel", [True, False], ids=["worker", "in-process"])
def test_a_bulk_build_is_the_catalog_a_plain_refresh_makes(tmp_path, projects, parallel):
    built = tmp_path / "new" / "catalog.db"
    stats = bulk.refresh_db(built, [projects], parallel=parallel)
    build_plain(tmp_path / "plain.db", [projects])
    assert stats.new == len(list(projects.rglob("*.jsonl"))) and stats.unchanged == 0
    assert_same_catalog(built, tmp_path / "plain.db")
    assert_sound(built)
    assert leftovers(built.parent) == []
    # The next refresh is the plain incremental one.
    again = bulk.refresh_db(built, [projects])
    assert (again.new, again.unchanged) == (0, stats.new)


@needs_worker
def test_the_worker_sidecar_is_adopted_and_a_search_finds_the_same_rows(tmp_path, projects, monkeypatch):
    ways = []
    real = fts.adopt_or_build
    monkeypatch.setattr(fts, "adopt_or_build", lambda *a: ways.append(real(*a)) or ways[-1])
    built = tmp_path / "catalog.db"
    bulk.refresh_db(built, [projects], parallel=True)
    assert ways == ["sidecar"]
    build_plain(tmp_path / "plain.db", [projects])
    q = "SELECT file_id, offset, idx FROM blocks WHERE rowid IN (SELECT rowid FROM blocks_fts WHERE blocks_fts MATCH ?)"
    for term in ('"tool_use_id"', "error", "prompt* NOT test"):
        a = sqlite3.connect(built).execute(q, (term,)).fetchall()
        b = sqlite3.connect(tmp_path / "plain.db").execute(q, (term,)).fetchall()
        assert sorted(a) == sorted(b)
    assert sqlite3.connect(built).execute(q, ("error",)).fetchall()


def test_a_sidecar_that_does_not_match_is_not_adopted(tmp_path, projects):
    # A sidecar indexing other blocks: its counts differ from the catalog's,
    # so the catalog indexes its own blocks instead.
    side = tmp_path / "side.db"
    probe = db.connect(tmp_path / "probe.db")
    writer = fts.SidecarWriter(str(side), fts.index_sql(probe))
    writer.add([(1, "zqxjwvk beta"), (2, None), (3, "gamma")])
    writer.finish()
    probe.close()
    build_plain(tmp_path / "cat.db", [projects])
    conn = sqlite3.connect(tmp_path / "cat.db", isolation_level=None)
    conn.execute("INSERT INTO blocks_fts(blocks_fts) VALUES ('delete-all')")  # empty, as in a bulk build
    conn.close()
    conn = sqlite3.connect(tmp_path / "cat.db", isolation_level=None)
    assert fts.adopt_or_build(conn, side) == "built"
    conn.execute("INSERT INTO blocks_fts(blocks_fts) VALUES ('integrity-check')")
    assert conn.execute("SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH 'zqxjwvk'").fetchone()[0] == 0
    conn.close()
    build_plain(tmp_path / "plain.db", [projects])
    assert_same_catalog(tmp_path / "cat.db", tmp_path / "plain.db")


@needs_worker
def test_new_files_parsed_by_the_worker_match_in_process_parsing(tmp_path, projects):
    # Not a bulk build: an existing catalog gets new files through the worker.
    folders = sorted(p for p in projects.iterdir() if p.is_dir())
    for name, parallel in (("a", True), ("b", False)):
        root = tmp_path / name / "projects"
        shutil.copytree(folders[0], root / folders[0].name)
        conn = db.connect(tmp_path / f"{name}.db")
        assert store.refresh(conn, [root], parallel=False).new >= 1
        for folder in folders[1:]:
            shutil.copytree(folder, root / folder.name)
        assert store.refresh(conn, [root], parallel=parallel).new >= 1
        conn.close()
    assert_same_catalog(tmp_path / "a.db", tmp_path / "b.db", same_files=False)


def test_publishing_never_replaces_a_catalog_made_meanwhile(tmp_path, projects):
    path = tmp_path / "catalog.db"
    conn = db.connect(path)  # another process got there first
    conn.execute("INSERT INTO _txdb_meta VALUES ('marker', 'theirs')")
    conn.close()
    assert bulk.build(path, [projects]) is None
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM _txdb_meta WHERE key = 'marker'").fetchone() == ("theirs",)
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 0
    conn.close()
    assert leftovers(tmp_path) == []
    # refresh_db then refreshes that catalog in place.
    stats = bulk.refresh_db(path, [projects])
    assert stats.new > 0
    assert sqlite3.connect(path).execute("SELECT value FROM _txdb_meta WHERE key = 'marker'").fetchone() == ("theirs",)


def test_unsound_scratch_files_of_dead_builds_are_removed(tmp_path, projects):
    path = tmp_path / "catalog.db"
    dead = dead_pid()
    stale = [tmp_path / f".catalog.db.building-{dead}", tmp_path / f".catalog.db.building-{dead}-fts",
             tmp_path / f".catalog.db.building-{dead}-journal"]
    live = tmp_path / f".catalog.db.building-{os.getppid()}"  # a running build of another process
    for p in [*stale, live]:
        p.write_bytes(b"half a catalog")
    bulk.refresh_db(path, [projects])
    assert not any(p.exists() for p in stale)
    assert live.exists()
    assert_sound(path)


def dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout)


def as_if_dead(folder: Path) -> None:
    """The scratch files this process left, renamed as a dead process's."""
    pid = dead_pid()
    for p in folder.iterdir():
        if f".building-{os.getpid()}" in p.name:
            p.rename(p.with_name(p.name.replace(f"-{os.getpid()}", f"-{pid}")))


@pytest.mark.parametrize("parallel", [True, False], ids=["worker", "in-process"])
def test_a_failing_build_publishes_nothing_and_the_next_resumes_it(tmp_path, projects, monkeypatch, parallel):
    if parallel and not worker.available():
        pytest.skip("no fork")
    restore = fail_nth_write(monkeypatch, 4)
    path = tmp_path / "catalog.db"
    with pytest.raises(sqlite3.OperationalError):
        bulk.refresh_db(path, [projects], parallel=parallel)
    assert not path.exists()
    left = leftovers(tmp_path)
    assert left and not any(n.endswith("-fts") for n in left)
    restore()
    as_if_dead(tmp_path)
    stats = bulk.refresh_db(path, [projects], parallel=parallel)
    assert stats.unchanged >= 1 and stats.new >= 1  # the files committed before the failure were kept
    assert leftovers(tmp_path) == []
    build_plain(tmp_path / "plain.db", [projects])
    assert_same_catalog(path, tmp_path / "plain.db")
    assert_sound(path)


@needs_worker
def test_a_build_killed_mid_file_is_resumed(tmp_path, projects):
    # A real SIGKILL in the middle of a file's transaction, in another process.
    path = tmp_path / "catalog.db"
    script = f"""
import os, signal, sys
from pathlib import Path
from txdb.ingest import bulk, store
real = store._write_rows
calls = [0]
def killing(c, *batch):
    calls[0] += 1
    real(c, *batch)
    if calls[0] == 5:
        os.kill(os.getpid(), signal.SIGKILL)
store._write_rows = killing
bulk.refresh_db(Path({str(path)!r}), [Path({str(projects)!r})], parallel=True)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    assert not path.exists() and leftovers(tmp_path)
    stats = bulk.refresh_db(path, [projects])
    assert stats.unchanged >= 1 and stats.new >= 1
    assert leftovers(tmp_path) == []
    build_plain(tmp_path / "plain.db", [projects])
    assert_same_catalog(path, tmp_path / "plain.db")
    assert_sound(path)


@needs_worker
def test_a_file_the_worker_cannot_index_stops_no_other(tmp_path, projects, monkeypatch):
    """Nothing in one file stops the others: a file whose lines the worker
    fails on is named in the summary, keeps no half of its rows, and is
    read again by the next refresh."""
    from sessions import conversation, write

    bad = projects / "-p-bad" / "bad.jsonl"
    write(bad, conversation(2, session="bad"))
    real = rows.FileIngest.add_object

    def broken(self, number, offset, length, obj, raw):
        if obj.get("sessionId") == "bad" and number == 3:
            raise ValueError("cannot parse this")
        return real(self, number, offset, length, obj, raw)

    monkeypatch.setattr(rows.FileIngest, "add_object", broken)  # inherited by the forked worker
    path = tmp_path / "catalog.db"
    stats = bulk.refresh_db(path, [projects], parallel=True)
    assert stats.unreadable == [{"path": str(bad), "error": "could not be indexed: ValueError: cannot parse this"}]
    assert "1 could not be read: " + str(bad) in stats.summary()
    monkeypatch.undo()
    build_plain(tmp_path / "plain.db", [projects])
    conn = db.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM files WHERE path = ?", (str(bad),)).fetchone()[0] == 0
        again = store.refresh(conn, [projects])
    finally:
        conn.close()
    assert again.new == 1 and again.unreadable == []
    per_file = ("SELECT f.path, count(r.offset), count(DISTINCT r.uuid) FROM files f "
                "LEFT JOIN records r ON r.file_id = f.id GROUP BY f.path ORDER BY f.path")
    built, plain = sqlite3.connect(path), sqlite3.connect(tmp_path / "plain.db")
    assert built.execute(per_file).fetchall() == plain.execute(per_file).fetchall()
    built.close(), plain.close()
    assert_sound(path)


def test_the_cli_builds_then_refreshes(tmp_path, projects):
    txdb = Path(sys.executable).with_name("txdb")
    path = tmp_path / "sub" / "catalog.db"
    first = subprocess.run([str(txdb), "refresh", "--root", str(projects), "--db", str(path)],
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert " new, 0 grown" in first.stdout and first.stderr == ""
    second = subprocess.run([str(txdb), "refresh", "--root", str(projects), "--db", str(path)],
                            capture_output=True, text=True)
    assert second.stdout.startswith("0 new, 0 grown, 0 rewritten, ")
    assert_sound(path)


@needs_worker
def test_the_whole_corpus_bulk_and_plain_agree(tmp_path, corpus):
    roots = [copy_fixture_sessions(tmp_path / "fixtures")]
    for name in ("real", "generated"):
        if (corpus / name).is_dir():
            shutil.copytree(corpus / name, tmp_path / name)
            roots.append(tmp_path / name)
    built = tmp_path / "bulk.db"
    bulk.refresh_db(built, roots, parallel=True)
    build_plain(tmp_path / "plain.db", roots)
    assert_same_catalog(built, tmp_path / "plain.db")
    assert_sound(built)


@pytest.mark.parametrize("parallel", [True, False], ids=["worker", "in-process"])
def test_another_refresh_adding_files_meanwhile(tmp_path, projects, parallel):
    """Another process commits between two of this refresh's files: it takes
    the id the next file was to get, and adds a later file itself."""
    if parallel and not worker.available():
        pytest.skip("no fork")
    path = tmp_path / "catalog.db"
    conn = db.connect(path)
    other = db.connect(path)
    files = sorted(str(p) for p in projects.rglob("*.jsonl"))
    state = {"done": False}

    def interleave(done, total):
        if state["done"]:
            return
        state["done"] = True
        # the other refresh: a next id, and (all of) one file not yet ingested here
        taken = {r[0] for r in other.execute("SELECT path FROM files")}
        later = [f for f in files if f not in taken][-1]
        store.refresh_path(other, later, root=str(projects))
        with db.transaction(other):
            nid = other.execute("SELECT max(id) + 1 FROM files").fetchone()[0]
            other.execute("INSERT INTO files (id, path, kind, size) VALUES (?, ?, 'session', 0)",
                          (nid, str(tmp_path / "elsewhere.jsonl")))
            other.execute("INSERT INTO files (id, path, kind, size) VALUES (?, ?, 'session', 0)",
                          (nid + 1, str(tmp_path / "elsewhere2.jsonl")))

    stats = store.refresh(conn, [projects], progress=interleave, parallel=parallel)
    assert stats.new + stats.unchanged == len(files)
    conn.close()
    other.close()
    plain = tmp_path / "plain.db"
    build_plain(plain, [projects])
    c = sqlite3.connect(path)
    c.execute("DELETE FROM files WHERE path LIKE '%elsewhere%'")
    c.commit()
    c.close()
    # Same rows, though file ids differ: compare by path.
    a, b = sqlite3.connect(path), sqlite3.connect(plain)
    q = ("SELECT f.path, r.offset, r.line, r.type, r.uuid, r.tokens, length(r.raw) FROM records r "
         "JOIN files f ON f.id = r.file_id ORDER BY 1, 2")
    assert a.execute(q).fetchall() == b.execute(q).fetchall()
    q = ("SELECT f.path, b.offset, b.idx, b.kind, b.tool_name, b.text FROM blocks b "
         "JOIN files f ON f.id = b.file_id ORDER BY 1, 2, 3")
    assert a.execute(q).fetchall() == b.execute(q).fetchall()
    q = "SELECT f.path, c.pos, c.offset FROM chain c JOIN files f ON f.id = c.file_id ORDER BY 1, 2"
    assert a.execute(q).fetchall() == b.execute(q).fetchall()
    a.execute("INSERT INTO blocks_fts(blocks_fts) VALUES ('integrity-check')")
    assert a.execute("SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH 'error'").fetchone() == \
        b.execute("SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH 'error'").fetchone()


def test_no_worker_is_forked_beside_other_threads(tmp_path, projects):
    import threading

    release = threading.Event()
    t = threading.Thread(target=release.wait)
    t.start()
    try:
        assert not worker.available()
        stats = bulk.refresh_db(tmp_path / "catalog.db", [projects], parallel=True)  # runs in-process
        assert stats.new > 0
    finally:
        release.set()
        t.join()
    assert_sound(tmp_path / "catalog.db")
