"""A new catalog is built in a scratch file and published whole: it must be
exactly the catalog the plain incremental refresh gives, full-text index
included, and a half-built catalog is never published."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from txdb.catalog import db
from txdb.catalog.ingest import bulk, rows, store
from txdb.catalog.ingest.chunks import json_function

from conftest import copy_fixture_sessions, fail_nth_write

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
    store.refresh(conn, roots)
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
    conn.close()
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".building-" in p.name)


def test_a_bulk_build_is_the_catalog_a_plain_refresh_makes(tmp_path, projects):
    built = tmp_path / "new" / "catalog.db"
    stats = bulk.refresh_db(built, [projects])
    build_plain(tmp_path / "plain.db", [projects])
    assert stats.new == len(list(projects.rglob("*.jsonl"))) and stats.unchanged == 0
    assert_same_catalog(built, tmp_path / "plain.db")
    assert_sound(built)
    assert leftovers(built.parent) == []
    # The next refresh is the plain incremental one.
    again = bulk.refresh_db(built, [projects])
    assert (again.new, again.unchanged) == (0, stats.new)


def test_new_files_added_to_a_catalog_match_a_first_build(tmp_path, projects):
    # An existing catalog gets new files: the same rows and index as a build
    # (the folders copied in the order a build discovers them: the same ids).
    from txdb.catalog.ingest.discover import discover

    folders = list(dict.fromkeys(Path(f.path).relative_to(projects).parts[0] for f in discover([projects])))
    folders = [projects / name for name in folders]
    root = tmp_path / "a" / "projects"
    shutil.copytree(folders[0], root / folders[0].name)
    conn = db.connect(tmp_path / "a.db")
    assert store.refresh(conn, [root]).new >= 1
    for folder in folders[1:]:
        shutil.copytree(folder, root / folder.name)
    assert store.refresh(conn, [root]).new >= 1
    conn.close()
    bulk.refresh_db(tmp_path / "b.db", [projects])
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
    stale = [tmp_path / f".catalog.db.building-{dead}", tmp_path / f".catalog.db.building-{dead}-fts",  # an older txdb's
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


def test_a_failing_build_publishes_nothing_and_the_next_resumes_it(tmp_path, projects, monkeypatch):
    monkeypatch.setattr(store, "BATCH_FILES", 1)  # a commit per file, as a large build has many batches
    restore = fail_nth_write(monkeypatch, 4)
    path = tmp_path / "catalog.db"
    with pytest.raises(sqlite3.OperationalError):
        bulk.refresh_db(path, [projects])
    assert not path.exists()
    assert leftovers(tmp_path)
    restore()
    as_if_dead(tmp_path)
    stats = bulk.refresh_db(path, [projects])
    assert stats.unchanged >= 1 and stats.new >= 1  # the files committed before the failure were kept
    assert leftovers(tmp_path) == []
    build_plain(tmp_path / "plain.db", [projects])
    assert_same_catalog(path, tmp_path / "plain.db")
    assert_sound(path)


def test_a_build_killed_mid_file_is_resumed(tmp_path, projects):
    # A real SIGKILL in the middle of a file's transaction, in another process.
    path = tmp_path / "catalog.db"
    script = f"""
import os, signal, sys
from pathlib import Path
from txdb.catalog.ingest import bulk, store
real = store._write_rows
calls = [0]
def killing(c, *batch):
    calls[0] += 1
    real(c, *batch)
    if calls[0] == 5:
        os.kill(os.getpid(), signal.SIGKILL)
store._write_rows = killing
store.BATCH_FILES = 1  # a commit per file, as a large build has many batches
bulk.refresh_db(Path({str(path)!r}), [Path({str(projects)!r})])
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


def test_a_file_the_build_cannot_index_stops_no_other(tmp_path, projects, monkeypatch):
    """Nothing in one file stops the others: a file whose lines the build
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

    monkeypatch.setattr(rows.FileIngest, "add_object", broken)
    path = tmp_path / "catalog.db"
    stats = bulk.refresh_db(path, [projects])
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


def test_the_whole_corpus_bulk_and_plain_agree(tmp_path, corpus):
    roots = [copy_fixture_sessions(tmp_path / "fixtures")]
    for name in ("real", "generated"):
        if (corpus / name).is_dir():
            shutil.copytree(corpus / name, tmp_path / name)
            roots.append(tmp_path / name)
    built = tmp_path / "bulk.db"
    bulk.refresh_db(built, roots)
    build_plain(tmp_path / "plain.db", roots)
    assert_same_catalog(built, tmp_path / "plain.db")
    assert_sound(built)


def test_another_refresh_adding_files_meanwhile(tmp_path, projects, monkeypatch):
    """Another process commits between two of this refresh's files: it takes
    the id the next file was to get, and adds a later file itself (between
    two batches: here one file each)."""
    monkeypatch.setattr(store, "BATCH_FILES", 1)
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

    stats = store.refresh(conn, [projects], progress=interleave)
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
    for c in (a, b):
        c.create_function("txdb_json", 2, json_function(c))
    q = ("SELECT f.path, r.offset, r.line, r.type, r.uuid, r.tokens, length(txdb_json(r.file_id, r.offset)) FROM records r "
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


def previous_schema(path: Path) -> None:
    """Turn a catalog back into what migration 008 left: 003's queue and
    triggers, and 010 not applied."""
    fts_sql = dict(db.migrations())["003_fts"]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for statement in db._split(fts_sql):
        if statement.lstrip().startswith(("CREATE TABLE", "CREATE TRIGGER")) or "CREATE TABLE" in statement \
                or "CREATE TRIGGER" in statement:
            conn.execute(statement)
    conn.execute("DELETE FROM _txdb_migrations WHERE name = '010_fts_by_refresh'")
    conn.execute("COMMIT")
    conn.close()


def test_the_migration_drops_the_queue_and_indexes_what_it_held(tmp_path, projects):
    path = tmp_path / "catalog.db"
    build_plain(path, [projects])
    build_plain(tmp_path / "plain.db", [projects])
    previous_schema(path)
    conn = sqlite3.connect(path, isolation_level=None)
    fts_triggers = "type = 'trigger' AND name LIKE 'blocks_fts%'"  # 003's; later migrations keep others
    assert conn.execute(f"SELECT count(*) FROM sqlite_master WHERE {fts_triggers}").fetchone()[0] == 5
    # Two blocks queued and not yet indexed, as the old schema held them mid-transaction.
    queued = conn.execute("SELECT rowid, text FROM blocks WHERE text <> '' ORDER BY rowid LIMIT 2").fetchall()
    conn.execute("BEGIN")
    for rowid, text in queued:
        conn.execute("INSERT INTO blocks_fts (blocks_fts, rowid, text) VALUES ('delete', ?, ?)", (rowid, text))
        conn.execute("INSERT INTO _blocks_fts_pending VALUES (?)", (rowid,))
    conn.execute("COMMIT")
    conn.close()
    db.connect(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute(f"SELECT name FROM sqlite_master WHERE ({fts_triggers}) OR name = '_blocks_fts_pending'"
                        ).fetchall() == []
    assert conn.execute("SELECT name FROM _txdb_migrations WHERE name = '010_fts_by_refresh'").fetchall() == [
        ("010_fts_by_refresh",)]
    conn.close()
    assert_same_catalog(path, tmp_path / "plain.db")
    assert_sound(path)
    # And the refresh keeps it current from there on.
    (projects / "-p-new").mkdir()
    shutil.copy(next(projects.rglob("*.jsonl")), projects / "-p-new" / "copy.jsonl")
    bulk.refresh_db(path, [projects])
    assert_sound(path)


def test_the_migration_indexes_an_older_build_that_deferred_its_index(tmp_path, projects):
    # An older txdb's interrupted first build: triggers dropped and saved, index empty
    # (a catalog from before 038, whose contentless index 010's rebuild cannot read).
    from rewind import rewind

    path = tmp_path / "catalog.db"
    build_plain(path, [projects])
    build_plain(tmp_path / "plain.db", [projects])
    conn = sqlite3.connect(path, isolation_level=None)
    rewind(conn, "038")
    conn.execute("DELETE FROM _txdb_migrations WHERE name = '010_fts_by_refresh'")
    conn.execute("CREATE TABLE _blocks_fts_pending (block_rowid INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO blocks_fts (blocks_fts) VALUES ('delete-all')")
    conn.execute("INSERT INTO _txdb_meta VALUES ('bulk_deferred_triggers', '{}')")
    conn.close()
    db.connect(path).close()
    assert_same_catalog(path, tmp_path / "plain.db")
    assert_sound(path)
    assert sqlite3.connect(path).execute(
        "SELECT count(*) FROM _txdb_meta WHERE key = 'bulk_deferred_triggers'").fetchone()[0] == 0


def test_the_index_after_grown_rewritten_and_pruned_files_is_a_fresh_builds(tmp_path, projects):
    """Every way a refresh changes a file leaves the full-text index exactly
    as a first build of the files as they are now would make it."""
    from sessions import append, conversation, user, write

    path = tmp_path / "catalog.db"
    extra = projects / "-p-extra"
    write(extra / "grows.jsonl", conversation(2, session="grows"))
    write(extra / "rewritten.jsonl", conversation(3, session="rewritten"))
    write(extra / "goes.jsonl", conversation(2, session="goes") + [user("ostrichfeather", session="goes")])
    bulk.refresh_db(path, [projects])
    assert sqlite3.connect(path).execute(
        "SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH 'ostrichfeather'").fetchone()[0] == 1
    last = orjson.loads((extra / "grows.jsonl").read_bytes().splitlines()[-1])["uuid"]
    append(extra / "grows.jsonl", user("zanzibar quokka appended", last, session="grows"))
    rewritten = extra / "rewritten.jsonl"
    rewritten.write_bytes(rewritten.read_bytes().replace(b"prompt", b"redrafted"))
    (extra / "goes.jsonl").unlink()
    conn = db.connect(path)
    stats = store.refresh(conn, [projects], prune=True)
    assert (stats.grown, stats.rewritten, stats.pruned) == (1, 1, 1)
    def hits(term):
        return conn.execute("SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH ?", (term,)).fetchone()[0]

    assert hits("zanzibar") == 1 and hits("redrafted") == 3 and hits("ostrichfeather") == 0
    conn.close()
    assert_sound(path)
    # A fresh build of the same files, in the same order, has the same index.
    fresh = tmp_path / "fresh.db"
    conn = db.connect(fresh)
    order = sqlite3.connect(path).execute("SELECT path FROM files ORDER BY id").fetchall()
    for (p,) in order:
        store.refresh_path(conn, p, str(projects))
    conn.close()
    a = sqlite3.connect(path)
    a.execute("ATTACH DATABASE ? AS other", (str(fresh),))
    a.execute("CREATE VIRTUAL TABLE temp.va USING fts5vocab(main, blocks_fts, row)")
    a.execute("CREATE VIRTUAL TABLE temp.vb USING fts5vocab(other, blocks_fts, row)")
    for x, y in (("va", "vb"), ("vb", "va")):
        assert a.execute(f"SELECT count(*) FROM (SELECT * FROM {x} EXCEPT SELECT * FROM {y})").fetchone()[0] == 0
    a.close()


def test_a_built_catalog_re_derives_nothing_on_its_first_open(tmp_path, projects):
    """A new catalog is built under today's rules and says so: its first open
    computes no estimate again (that was 5% of a cold build)."""
    path = tmp_path / "catalog.db"
    bulk.refresh_db(path, [projects])
    conn = sqlite3.connect(path, isolation_level=None)
    assert db.rederive(conn) is False
    conn.close()
