"""Refresh: discovery, whole rows, and the incremental rules."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import fail_nth_write, rows
from sessions import DATA, append, assistant, conversation, user, write
from txdb.catalog import db
from txdb.catalog.ingest import store
from txdb.model.verify import verify_file
from txdb.catalog.ingest.store import refresh


def line_count(path: Path) -> int:
    data = path.read_bytes()
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def test_a_failing_write_rolls_back_the_open_batch_only(conn, tmp_path, monkeypatch):
    """A catalog that fails (a full disk) loses only the batch being written:
    files of batches committed before it stay, and the next refresh reads
    the rest."""
    monkeypatch.setattr(store, "BATCH_FILES", 1)  # each file its own batch, as a long refresh has many
    root = tmp_path / "projects"
    write(root / "-p" / "a.jsonl", conversation(2, session="a"))
    write(root / "-p" / "b.jsonl", conversation(2, session="b"))
    restore = fail_nth_write(monkeypatch, 2)
    with pytest.raises(sqlite3.OperationalError):
        refresh(conn, [root])
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 8
    restore()
    assert refresh(conn, [root]).new == 1
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 16


def test_files_of_one_batch_commit_together(conn, tmp_path, monkeypatch):
    root = tmp_path / "projects"
    for name in "abc":
        write(root / "-p" / f"{name}.jsonl", conversation(2, session=name))
    restore = fail_nth_write(monkeypatch, 3)  # the third file's rows: all three are one batch
    with pytest.raises(sqlite3.OperationalError):
        refresh(conn, [root])
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 0
    restore()
    assert refresh(conn, [root]).new == 3
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 24


def test_a_file_that_fails_rolls_back_alone_inside_its_batch(conn, tmp_path, monkeypatch):
    """A file whose rows cannot be made (not the catalog's fault) is named
    unreadable and leaves nothing; the files around it in the same batch
    commit, their full-text index included."""
    root = tmp_path / "projects"
    for name in "abc":
        write(root / "-p" / f"{name}.jsonl", conversation(2, session=name))
    real = store._write_rows
    calls = {"n": 0}

    def fail_second_file(c, batch, raws):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ValueError("a line txdb cannot make rows of")
        return real(c, batch, raws)

    monkeypatch.setattr(store, "_write_rows", fail_second_file)
    stats = refresh(conn, [root])
    assert stats.new == 2 and [u["error"] for u in stats.unreadable] == [
        "could not be indexed: ValueError: a line txdb cannot make rows of"]
    bad = stats.unreadable[0]["path"]
    assert conn.execute("SELECT count(*) FROM files WHERE path = ?", (bad,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(DISTINCT file_id) FROM records").fetchone()[0] == 2
    indexed = conn.execute("SELECT count(*) FROM blocks_fts").fetchone()[0]
    assert indexed == conn.execute("SELECT count(*) FROM blocks WHERE text <> ''").fetchone()[0] > 0
    conn.execute("INSERT INTO blocks_fts (blocks_fts) VALUES ('integrity-check')")
    monkeypatch.setattr(store, "_write_rows", real)
    assert refresh(conn, [root]).new == 1  # the failed file is read again
    assert conn.execute("SELECT count(DISTINCT file_id) FROM records").fetchone()[0] == 3


_KILL_MID_REFRESH = """
import os, signal, sys
from pathlib import Path
from txdb.catalog import db
from txdb.catalog.ingest import store
store.BATCH_FILES = 3
real, calls = store._write_rows, [0]
def write_then_die(c, batch, raws):
    calls[0] += 1
    if calls[0] == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(c, batch, raws)
store._write_rows = write_then_die
store.refresh(db.connect(sys.argv[1]), [Path(sys.argv[2])])
"""


def _catalog_of(path) -> list[tuple]:
    c = sqlite3.connect(path)
    try:
        return c.execute(
            "SELECT f.path, f.lines, f.cursor, (SELECT count(*) FROM records r WHERE r.file_id = f.id), "
            "(SELECT count(*) FROM blocks b WHERE b.file_id = f.id), "
            "(SELECT count(*) FROM blocks_fts WHERE blocks_fts MATCH 'done' AND rowid IN "
            " (SELECT rowid FROM blocks b WHERE b.file_id = f.id)) FROM files f ORDER BY f.path").fetchall()
    finally:
        c.close()


def test_a_refresh_killed_mid_batch_leaves_nothing_half_written(tmp_path):
    """kill -9 in the middle of a batch (two batches already committed): the
    catalog holds whole files only, and the next refresh makes it what a
    refresh that was never killed makes."""
    import subprocess
    import sys

    root = tmp_path / "projects"
    for i in range(10):
        write(root / "-p" / f"s{i}.jsonl", conversation(3, session=f"s{i}"))
    killed = tmp_path / "killed.db"
    db.connect(killed).close()
    p = subprocess.run([sys.executable, "-c", _KILL_MID_REFRESH, str(killed), str(root), "8"],
                       capture_output=True, text=True)
    assert p.returncode == -9, p.stderr
    c = sqlite3.connect(killed)
    assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    c.execute("INSERT INTO blocks_fts (blocks_fts) VALUES ('integrity-check')")
    kept = c.execute("SELECT count(*) FROM files").fetchone()[0]
    assert kept == 6  # batches of 3 files: two committed, the third died in its second file
    assert c.execute("SELECT count(*) FROM records WHERE file_id NOT IN (SELECT id FROM files)").fetchone()[0] == 0
    c.close()
    for path, lines, cursor, records, _blocks, _hits in _catalog_of(killed):
        assert lines == records == line_count(Path(path)) and cursor == Path(path).stat().st_size
    conn = db.connect(killed)
    assert refresh(conn, [root]).new == 4
    conn.close()
    clean = tmp_path / "clean.db"
    conn = db.connect(clean)
    refresh(conn, [root])
    conn.close()
    assert _catalog_of(killed) == _catalog_of(clean)
    assert all(hits > 0 for *_, hits in _catalog_of(clean))


def test_every_line_is_a_record_or_a_parse_error(catalog, projects):
    files = sorted(p for p in projects.rglob("*.jsonl"))
    assert len(files) >= 9
    for p in files:
        fid = catalog.execute("SELECT id FROM files WHERE path = ?", (str(p),)).fetchone()[0]
        n = catalog.execute(
            "SELECT count(*) FROM (SELECT line FROM records WHERE file_id = ? "
            "UNION SELECT line FROM parse_errors WHERE file_id = ?)",
            (fid, fid),
        ).fetchone()[0]
        assert n == line_count(p), p


def test_record_row_is_whole(catalog, projects):
    path = projects / "-home-marco-spotter" / "short.jsonl"
    first = path.read_bytes().split(b"\n")[0]
    obj = orjson.loads(first)
    (row,) = rows(catalog, "SELECT r.*, txdb_json(r.file_id, r.offset) AS raw FROM records r "
                           "JOIN files f ON f.id = r.file_id "
                           "WHERE f.path = ? AND r.line = 1", (str(path),))
    del row["file_id"]
    assert row == {
        "offset": 0,
        "length": len(first),
        "line": 1,
        "session_id": obj.get("sessionId"),
        "type": obj["type"],
        "subtype": obj.get("subtype"),
        "uuid": obj.get("uuid"),
        "parent_uuid": obj.get("parentUuid"),
        "logical_parent_uuid": None,
        "leaf_uuid": None,
        "timestamp": obj.get("timestamp"),
        "is_sidechain": 1 if obj.get("isSidechain") else 0,
        "is_meta": 1 if obj.get("isMeta") else None,
        "role": (obj.get("message") or {}).get("role"),
        "model": (obj.get("message") or {}).get("model"),
        "message_id": (obj.get("message") or {}).get("id"),
        "request_id": obj.get("requestId"),
        "tokens": row["tokens"],
        "compact_summary": None,
        "forked": None,
        "json": None,  # a cost-state line's JSON only
        "raw": first.decode(),  # from raw_chunks
    }


def test_discovery_links_subagents_and_skips_tool_results(conn, projects):
    sub = projects / "-experiments-worktrees" / "ef958aa1-0e93-49f0-bb71-150f63befcd1"
    tr = sub / "tool-results"
    tr.mkdir()
    (tr / "x.jsonl").write_text('{"type":"user"}\n')
    (projects / "-p" / "s.jsonl.pending").parent.mkdir()
    (projects / "-p" / "s.jsonl.pending").write_text('{"type":"user"}\n')
    (projects / "-p" / "s.jsonl.bak").write_text('{"type":"user"}\n')
    refresh(conn, [projects])
    paths = {r[0] for r in conn.execute("SELECT path FROM files")}
    assert not any("tool-results" in p or p.endswith((".pending", ".bak")) for p in paths)
    (s,) = rows(conn, "SELECT s.session_id, s.parent_session_id, s.project FROM sessions s "
                      "JOIN files f ON f.id = s.file_id WHERE f.kind = 'subagent' "
                      "AND f.path LIKE '%ef958aa1%subagents%'")
    assert s == {
        "session_id": "agent-a4ca7529859c158c2",
        "parent_session_id": "ef958aa1-0e93-49f0-bb71-150f63befcd1",
        "project": "-experiments-worktrees",
    }
    legacy = rows(conn, "SELECT f.kind, s.session_id, s.parent_session_id FROM files f JOIN sessions s "
                        "ON s.file_id = f.id WHERE f.path LIKE '%agent-1d78a5e5.jsonl'")
    assert legacy[0]["kind"] == "subagent"
    assert legacy[0]["session_id"] == "agent-1d78a5e5"
    assert legacy[0]["parent_session_id"]  # the sessionId its lines carry


def test_symlinked_folders_are_skipped_but_symlinked_files_count(conn, tmp_path, projects):
    other = tmp_path / "elsewhere"
    write(other / "-x" / "a.jsonl", conversation(1, session="a"))
    os.symlink(other / "-x", projects / "-linked-dir")
    os.symlink(other / "-x" / "a.jsonl", projects / "-home-marco-spotter" / "linked.jsonl")
    refresh(conn, [projects])
    paths = {r[0] for r in conn.execute("SELECT path FROM files")}
    assert str(projects / "-home-marco-spotter" / "linked.jsonl") in paths
    assert not any("-linked-dir" in p for p in paths)


def test_a_project_folder_moved_and_linked_back_is_named_once_never_followed(conn, tmp_path):
    """A project folder moved to another disk and linked back: refresh
    still does not follow the link, but names it (once per root, whatever
    the files under it; a count past three), says its catalogued files stay
    as last read, and how to read it: its target's folder as a --root."""
    root, disk = tmp_path / "projects", tmp_path / "disk"
    write(root / "-p" / "a.jsonl", conversation(2, session="a"))
    write(root / "-p" / "b.jsonl", conversation(2, session="b"))
    refresh(conn, [root])
    disk.mkdir()
    shutil.move(root / "-p", disk / "-p")
    os.symlink(disk / "-p", root / "-p")
    append(disk / "-p" / "a.jsonl", *conversation(1, session="a")[:1])
    stats = refresh(conn, [root])
    assert stats.grown == stats.new == stats.gone == 0  # not followed: nothing under it read
    assert stats.linked == [{"path": str(root / "-p"), "root": str(root), "target": str(disk / "-p"),
                             "root_to_give": str(disk), "catalogued": 2, "catalogued_at_target": 0}]
    (warning,) = stats.warnings
    assert warning.startswith(f"1 linked folder under {root} not read (refresh never follows a link): "
                              f"{root / '-p'} -> {disk / '-p'}; the 2 files catalogued under it stay as last read"), warning
    assert warning.endswith(f"txdb refresh --root {disk}"), warning
    assert stats.summary().endswith("; 1 linked folder not read (a link is never followed)")
    for name in "qrst":
        (disk / name).mkdir()
        os.symlink(disk / name, root / f"-{name}")
    stats = refresh(conn, [root, root])  # a root given twice names each link once
    (warning,) = stats.warnings
    assert warning.startswith("5 linked folders under") and " and 2 more; " in warning, warning
    assert len(stats.linked) == 5
    stats = refresh(conn, [disk])  # what the warning says to do: the append is read
    assert stats.grown == 1 and stats.warnings == []
    linked = {d["path"]: d for d in refresh(conn, [root]).linked}[str(root / "-p")]
    assert (linked["catalogued"], linked["catalogued_at_target"]) == (0, 2)  # its rows moved to the target's paths


def test_session_id_falls_back_to_stem_and_titles_follow_precedence(conn, tmp_path):
    root = tmp_path / "projects"
    write(root / "-p" / "no-ids.jsonl", [{"type": "summary", "summary": "old summary", "leafUuid": "x"}])
    objs = conversation(1, session="abc")
    objs += [
        {"type": "ai-title", "aiTitle": "AI title", "sessionId": "abc"},
        {"type": "summary", "summary": "first summary", "leafUuid": objs[-1]["uuid"]},
        {"type": "summary", "summary": "second summary", "leafUuid": objs[-1]["uuid"]},
        {"type": "agent-name", "agentName": "agent name", "sessionId": "abc"},
    ]
    write(root / "-p" / "abc.jsonl", objs)
    refresh(conn, [root])
    got = dict(conn.execute("SELECT f.path, s.session_id || '|' || s.title FROM sessions s JOIN files f ON f.id = s.file_id"))
    assert got[str(root / "-p" / "no-ids.jsonl")] == "no-ids|old summary"
    assert got[str(root / "-p" / "abc.jsonl")] == "abc|agent name"
    append(root / "-p" / "abc.jsonl", {"type": "custom-title", "customTitle": "mine", "sessionId": "abc"})
    append(root / "-p" / "abc.jsonl", {"type": "ai-title", "aiTitle": "later AI", "sessionId": "abc"})
    refresh(conn, [root])
    assert conn.execute("SELECT title, title_source FROM sessions WHERE session_id = 'abc'").fetchone() == (
        "mine", "custom-title")


def test_growth_reads_only_the_new_lines_and_extends_the_chain(conn, tmp_path):
    root = tmp_path / "projects"
    path = write(root / "-p" / "s.jsonl", conversation(3))
    s1 = refresh(conn, [root])
    assert (s1.new, s1.lines) == (1, 12)
    cursor = conn.execute("SELECT cursor FROM files").fetchone()[0]
    assert cursor == path.stat().st_size
    leaf = orjson.loads(path.read_bytes().splitlines()[-1])["uuid"]
    u = user("more", leaf)
    a = assistant("ok", u["uuid"])
    append(path, u, a)
    s2 = refresh(conn, [root])
    assert (s2.grown, s2.lines, s2.new, s2.rewritten) == (1, 2, 0, 0)
    assert s2.bytes == path.stat().st_size - cursor
    chain = [r[0] for r in conn.execute("SELECT r.uuid FROM active_chain r ORDER BY pos")]
    assert len(chain) == 14 and chain[-2:] == [u["uuid"], a["uuid"]]
    assert conn.execute("SELECT leaf_uuid, chain_length, lines FROM sessions").fetchone() == (a["uuid"], 14, 14)
    s3 = refresh(conn, [root])
    assert (s3.unchanged, s3.lines) == (1, 0)


def test_growth_on_another_branch_recomputes_the_chain(conn, tmp_path):
    root = tmp_path / "projects"
    objs = conversation(2)
    path = write(root / "-p" / "s.jsonl", objs)
    refresh(conn, [root])
    # A rewind: a new prompt hanging off the first turn's end.
    u = user("rewound", objs[3]["uuid"])
    append(path, u)
    refresh(conn, [root])
    chain = [r[0] for r in conn.execute("SELECT uuid FROM active_chain ORDER BY pos")]
    assert chain == [o["uuid"] for o in objs[:4]] + [u["uuid"]]


def test_rewritten_file_is_reingested(conn, tmp_path):
    root = tmp_path / "projects"
    path = write(root / "-p" / "s.jsonl", conversation(3))
    refresh(conn, [root])
    # Same size or larger, different bytes: a rewrite, not growth.
    objs = conversation(4)
    tmp = path.with_suffix(".new")
    write(tmp, objs)
    os.replace(tmp, path)
    s = refresh(conn, [root])
    assert s.rewritten == 1
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 16
    assert {r[0] for r in conn.execute("SELECT uuid FROM records")} == {o["uuid"] for o in objs}


def test_shrunk_file_in_place_is_reingested(conn, tmp_path):
    root = tmp_path / "projects"
    path = write(root / "-p" / "s.jsonl", conversation(3))
    refresh(conn, [root])
    data = path.read_bytes().splitlines(keepends=True)
    with open(path, "wb") as fh:  # same inode, truncated
        fh.writelines(data[:5])
    s = refresh(conn, [root])
    assert s.rewritten == 1
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 5


def test_an_edit_in_place_of_the_same_size_is_read_again_and_restored_as_it_is(conn, tmp_path):
    """An editor that saves in place (same inode, same size, the first 4 KiB
    and the last bytes unchanged) changed a line in the middle: refresh reads
    the file again, so its rows, its sha256 and what restore gives back are
    the bytes it now holds."""
    root = tmp_path / "projects"
    objs = conversation(40)
    path = write(root / "-p" / "s.jsonl", objs)
    refresh(conn, [root])
    data = path.read_bytes()
    mid = len(data) // 2
    word = objs[len(objs) // 2]["uuid"].encode()
    at = data.index(word, mid - 4096)
    edited = data[:at] + b"X" * len(word) + data[at + len(word):]
    assert len(edited) == len(data) and edited[:4096] == data[:4096] and edited[-300:] == data[-300:]
    with open(path, "r+b") as fh:  # the same inode
        fh.write(edited)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    s = refresh(conn, [root])
    assert s.rewritten == 1
    (sha,) = conn.execute("SELECT sha256 FROM files").fetchone()
    assert sha == hashlib.sha256(edited).hexdigest()
    assert conn.execute("SELECT count(*) FROM records WHERE uuid = ?", (word.decode(),)).fetchone() == (0,)
    path.unlink()
    refresh(conn, [root])
    from txdb.surgery import restore

    restore.restore([restore.plan_restore(conn, restore.choose(conn, str(path)))])
    assert path.read_bytes() == edited


def test_a_link_no_root_reads_rightly_gets_no_root_to_give_and_names_print_on_one_line(conn, tmp_path):
    """A link to /, to the root itself or to a folder under it: no --root
    would read its target rightly (all of a disk, or what the root reads
    already), so none is suggested; links are named in order, and a name
    holding a newline or an escape prints on the warning's one line."""
    root = tmp_path / "projects"
    write(root / "-p" / "a.jsonl", conversation(1, session="a"))
    os.symlink("/", root / "-slash")
    os.symlink(root, root / "-self")
    os.symlink(root / "-p", root / "-again")
    os.symlink(root / "-p", root / "-b\nWarning: forged\x1b[2J")
    stats = refresh(conn, [root])
    assert [Path(d["path"]).name for d in stats.linked] == sorted(Path(d["path"]).name for d in stats.linked)
    assert [d["root_to_give"] for d in stats.linked] == [None] * 4
    (warning,) = stats.warnings
    assert "txdb refresh --root" not in warning and "No --root reads their targets rightly" in warning
    from click.testing import CliRunner
    from txdb.cli import cli

    r = CliRunner().invoke(cli, ["refresh", "--root", str(root), "--db", str(tmp_path / "c.db")])
    lines = [line for line in r.output.splitlines() if line.startswith("Warning")]
    assert len(lines) == 1 and "-b\\x0aWarning: forged\\x1b[2J" in lines[0], r.output


def test_partial_last_line_waits_for_its_newline(conn, tmp_path):
    root = tmp_path / "projects"
    objs = conversation(1)
    path = write(root / "-p" / "s.jsonl", objs)
    refresh(conn, [root])
    extra = orjson.dumps(user("half written", objs[-1]["uuid"]))
    with open(path, "ab") as fh:
        fh.write(extra[:40])
    s = refresh(conn, [root])
    assert s.lines == 0
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 4
    with open(path, "ab") as fh:
        fh.write(extra[40:] + b"\n")
    s = refresh(conn, [root])
    assert (s.grown, s.lines) == (1, 1)
    assert conn.execute("SELECT count(*), max(line) FROM records").fetchone() == (5, 5)
    assert conn.execute("SELECT count(*) FROM parse_errors").fetchone()[0] == 0


def test_published_file_without_final_newline_then_grows(conn, tmp_path):
    root = tmp_path / "projects"
    objs = conversation(1)
    path = write(root / "-p" / "s.jsonl", objs, trailing_newline=False)
    s = refresh(conn, [root])
    assert s.lines == 4
    # The writer resumes: it ends the last line, then appends another.
    extra = user("next", objs[-1]["uuid"])
    with open(path, "ab") as fh:
        fh.write(b"\n" + orjson.dumps(extra) + b"\n")
    s = refresh(conn, [root])
    assert (s.grown, s.lines) == (1, 1)
    assert conn.execute("SELECT count(*) FROM parse_errors").fetchone()[0] == 0
    assert conn.execute("SELECT line FROM records WHERE uuid = ?", (extra["uuid"],)).fetchone()[0] == 5


def test_vanished_file_keeps_rows_until_pruned(conn, tmp_path):
    root = tmp_path / "projects"
    path = write(root / "-p" / "s.jsonl", conversation(2))
    write(root / "-p" / "t.jsonl", conversation(1, session="t"))
    refresh(conn, [root])
    path.unlink()
    s = refresh(conn, [root])
    assert s.gone == 1
    assert conn.execute("SELECT gone FROM files WHERE path = ?", (str(path),)).fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id "
                        "WHERE f.path = ?", (str(path),)).fetchone()[0] == 8
    s = refresh(conn, [root], prune=True)
    assert s.pruned == 1
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 4


def test_a_fork_repeating_uuids_is_kept_whole_in_both_files(conn, tmp_path):
    root = tmp_path / "projects"
    objs = conversation(2)
    write(root / "-p" / "a.jsonl", objs)
    write(root / "-p" / "b.jsonl", [dict(o, sessionId="b") for o in objs])
    refresh(conn, [root])
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 16
    assert conn.execute("SELECT count(DISTINCT file_id) FROM chain").fetchone()[0] == 2
    assert conn.execute("SELECT count(*) FROM chain").fetchone()[0] == 16


def test_usage_counts_each_api_message_once(conn, tmp_path):
    root = tmp_path / "projects"
    u = user("hi", None)
    usage = {"input_tokens": 3, "output_tokens": 7, "cache_read_input_tokens": 1000,
             "cache_creation_input_tokens": 50,
             "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 50}}
    a1 = assistant([{"type": "thinking", "thinking": "", "signature": "x" * 500}], u["uuid"],
                   msg_id="msg_A", usage=usage)
    a2 = assistant([{"type": "text", "text": "answer"}], a1["uuid"], msg_id="msg_A", usage=usage)
    write(root / "-p" / "s.jsonl", [u, a1, a2])
    refresh(conn, [root])
    (row,) = rows(conn, "SELECT * FROM usage")
    del row["file_id"]
    assert row == {
        "message_id": "msg_A", "offset": row["offset"], "request_id": a1["requestId"],
        "session_id": "s-1", "timestamp": a1["timestamp"], "model": "claude-opus-5",
        "input_tokens": 3, "output_tokens": 7, "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 50, "ephemeral_5m_input_tokens": 0,
        "ephemeral_1h_input_tokens": 50, "service_tier": None, "iterations": None,
        # what the file holds now (the gauge's figures): the API's until a usage reset
        "gauge_input_tokens": 3, "gauge_cache_read_input_tokens": 1000,
        "gauge_cache_creation_input_tokens": 50, "gauge_iterations": None, "in_file": 1, "rewritten": 0, "invalid": None,
        "billed": 1,  # the one file that has it: it counts there
    }
    (g,) = rows(conn, "SELECT gauge_tokens, recorded_context FROM context_gauge")
    assert g == {"gauge_tokens": 1053, "recorded_context": 1053}
    (b,) = rows(conn, "SELECT kind, chars, signature_chars FROM blocks WHERE type = 'thinking'")
    assert b == {"kind": "thinking", "chars": 0, "signature_chars": 500}


def test_append_while_refreshing_never_duplicates_or_loses(conn, tmp_path):
    root = tmp_path / "projects"
    objs = conversation(2)
    path = write(root / "-p" / "s.jsonl", objs)
    stop = threading.Event()
    written = [len(objs)]

    def writer():
        parent = objs[-1]["uuid"]
        with open(path, "ab", buffering=0) as fh:
            for i in range(60):
                o = user(f"line {i}", parent)
                parent = o["uuid"]
                data = orjson.dumps(o) + b"\n"
                # Written in two pieces, like a flush that lands mid-line.
                fh.write(data[:25])
                time.sleep(0.001)
                fh.write(data[25:])
                written[0] += 1
                time.sleep(0.002)
        stop.set()

    t = threading.Thread(target=writer)
    t.start()
    while not stop.is_set():
        refresh(conn, [root])
    t.join()
    refresh(conn, [root])
    n, maxline, distinct = conn.execute("SELECT count(*), max(line), count(DISTINCT offset) FROM records").fetchone()
    assert n == maxline == distinct == written[0] == line_count(path)
    assert conn.execute("SELECT count(*) FROM parse_errors").fetchone()[0] == 0
    assert conn.execute("SELECT chain_length FROM sessions").fetchone()[0] == written[0]


def test_a_crash_mid_refresh_is_completed_by_the_next_one(conn, tmp_path, monkeypatch):
    root = tmp_path / "projects"
    write(root / "-p" / "a.jsonl", conversation(2, session="a"))
    write(root / "-p" / "b.jsonl", conversation(2, session="b"))
    real = store.FileIngest.flush
    calls = {"n": 0}

    def crashing_flush(self):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed")
        return real(self)

    monkeypatch.setattr(store.FileIngest, "flush", crashing_flush)
    with pytest.raises(KeyboardInterrupt):
        refresh(conn, [root])
    monkeypatch.setattr(store.FileIngest, "flush", real)
    # Both files were one batch: the interrupt took the whole batch, nothing half-written.
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 0
    s = refresh(conn, [root])
    assert (s.new, s.unchanged) == (2, 0)
    assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 16


def test_missing_root_is_an_empty_catalog(conn, tmp_path):
    s = refresh(conn, [tmp_path / "nope"])
    assert s.roots_missing == [str(tmp_path / "nope")]
    assert s.files == 0


def test_compact_boundary_is_a_new_root_and_progress_is_bridged(conn, tmp_path):
    root = tmp_path / "projects"
    objs = conversation(1)
    boundary = {"parentUuid": None, "logicalParentUuid": objs[-1]["uuid"], "isSidechain": False,
                "type": "system", "subtype": "compact_boundary", "content": "Conversation compacted",
                "uuid": "b-1", "timestamp": "2026-11-01T11:00:00.000Z", "sessionId": "s-1",
                "compactMetadata": {"trigger": "manual", "preTokens": 1000}}
    summary = user("summary of before", "b-1", isCompactSummary=True)
    progress = {"parentUuid": summary["uuid"], "type": "progress", "uuid": "p-1",
                "data": {"type": "hook_progress"}, "sessionId": "s-1", "isSidechain": False}
    after = user("after", "p-1")
    write(root / "-p" / "s.jsonl", objs + [boundary, summary, progress, after])
    refresh(conn, [root])
    chain = [tuple(r) for r in conn.execute("SELECT pos, uuid, type FROM active_chain ORDER BY pos")]
    assert chain == [(0, "b-1", "system"), (1, summary["uuid"], "user"), (2, after["uuid"], "user")]


def test_migrations_from_blank_and_reopen_are_idempotent(tmp_path):
    path = tmp_path / "c.db"
    c = db.connect(path)
    names = [r[0] for r in c.execute("SELECT name FROM _txdb_migrations ORDER BY name")]
    assert names == [n for n, _ in db.migrations()]
    views = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    assert {n for n, _ in db.view_files()} <= views
    c.close()
    c = db.connect(path)
    assert db.migrate(c) == []
    assert db.ensure_views(c) is False
    c.close()


def test_older_schema_is_migrated_forward(tmp_path):
    path = tmp_path / "c.db"
    first_name, first_sql = db.migrations()[0]
    import sqlite3
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE _txdb_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
    for stmt in db._split(first_sql):
        raw.execute(stmt)
    raw.execute("INSERT INTO _txdb_migrations VALUES (?, 'then')", (first_name,))
    raw.commit()
    raw.close()
    c = db.connect(path)
    names = [r[0] for r in c.execute("SELECT name FROM _txdb_migrations ORDER BY name")]
    assert names == [n for n, _ in db.migrations()]
    c.close()


def test_views_are_recreated_when_their_sql_changes(conn):
    conn.execute("UPDATE _txdb_meta SET value = 'stale' WHERE key = 'views_sha'")
    conn.execute("DROP VIEW session_costs")
    assert db.ensure_views(conn) is True
    assert conn.execute("SELECT count(*) FROM session_costs").fetchone()[0] == 0


def test_corpus_refresh_has_every_line(conn, corpus, tmp_path):
    roots = [corpus / "real", corpus / "generated"]
    s = refresh(conn, roots)
    assert s.files > 100
    total_lines = 0
    for root in roots:
        for p in root.rglob("*.jsonl"):
            if "tool-results" in p.parts:
                continue
            total_lines += line_count(p)
    got = conn.execute(
        "SELECT (SELECT count(*) FROM (SELECT DISTINCT file_id, line FROM records)) + "
        "(SELECT count(*) FROM parse_errors WHERE recovered = 0)"
    ).fetchone()[0]
    assert got == total_lines
    # The glued line of the Entire checkpoint is split and both objects kept.
    glued = rows(conn, "SELECT p.line, p.recovered FROM parse_errors p JOIN files f ON f.id = p.file_id "
                       "WHERE f.path LIKE '%995ebed6e4%'")
    assert glued == [{"line": 128, "recovered": 1}]
    assert conn.execute("SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id "
                        "WHERE f.path LIKE '%995ebed6e4%' AND r.line = 128").fetchone()[0] == 2


def test_usage_of_a_streamed_message_keeps_the_largest_line(conn, tmp_path):
    # Older CLIs wrote one line per block, output_tokens growing line by line.
    root = tmp_path / "projects"
    u = user("hi", None)
    small = {"input_tokens": 3, "output_tokens": 1, "cache_read_input_tokens": 10}
    big = {"input_tokens": 3, "output_tokens": 354, "cache_read_input_tokens": 10}
    a1 = assistant("part one", u["uuid"], msg_id="msg_S", usage=small)
    a2 = assistant("part two", a1["uuid"], msg_id="msg_S", usage=big)
    path = write(root / "-p" / "s.jsonl", [u, a1])
    refresh(conn, [root])
    append(path, a2)  # the growth arrives in a later refresh
    refresh(conn, [root])
    got = conn.execute("SELECT output_tokens, offset FROM usage").fetchall()
    first_offset = conn.execute("SELECT offset FROM records WHERE uuid = ?", (a1["uuid"],)).fetchone()[0]
    assert got == [(354, first_offset)]


def test_dangling_parents_are_found_at_refresh_and_cleared_when_the_parent_arrives(conn, tmp_path):
    root = tmp_path / "projects"
    objs = conversation(2)
    objs[4]["parentUuid"] = "late-parent"  # turn 2 hangs off a line not written yet
    path = write(root / "-p" / "s.jsonl", objs)
    refresh(conn, [root])
    # judged as `verify` judges it (tests/test_rules.py: bridged and cut-off gaps)
    health = rows(conn, "SELECT line, problem, severity FROM chain_health WHERE line = 5")
    found = [f for f in verify_file(path).findings if f.line == 5]
    assert health == [{"line": f.line, "problem": f.code, "severity": f.severity} for f in found]
    assert health and health[0]["problem"] in ("bridged_parent", "cut_off_messages")
    append(path, user("the late parent", objs[3]["uuid"], uid="late-parent"))
    refresh(conn, [root])
    assert conn.execute("SELECT count(*) FROM dangling_parents").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM chain_findings").fetchone()[0] == 0


def test_sessions_kept_incrementally_equal_a_cold_refresh(tmp_path, projects):
    """Grow every fixture session line by line; the catalog must end equal
    to one refreshed from the final files in one go."""
    grown_root = tmp_path / "grown"
    warm = db.connect(tmp_path / "warm.db")
    sources = sorted(p for p in projects.rglob("*.jsonl") if p.stat().st_size)
    for src in sources:
        dst = grown_root / src.relative_to(projects)
        dst.parent.mkdir(parents=True, exist_ok=True)
        lines = src.read_bytes().splitlines(keepends=True)
        step = max(1, len(lines) // 4)
        for i in range(0, len(lines), step):
            with open(dst, "ab") as fh:
                fh.writelines(lines[i:i + step])
            refresh(warm, [grown_root])
    cold = db.connect(tmp_path / "cold.db")
    refresh(cold, [grown_root])
    q = ("SELECT f.path, s.session_id, s.title, s.lines, s.messages, s.chain_length, s.leaf_uuid, "
         "s.chain_tokens, s.chain_bytes, s.record_bytes, s.journal_bytes, s.first_timestamp, "
         "s.last_timestamp FROM sessions s JOIN files f ON f.id = s.file_id ORDER BY f.path")
    assert warm.execute(q).fetchall() == cold.execute(q).fetchall()
    q2 = "SELECT f.path, c.pos, c.offset FROM chain c JOIN files f ON f.id = c.file_id ORDER BY 1, 2"
    assert warm.execute(q2).fetchall() == cold.execute(q2).fetchall()
    q3 = ("SELECT f.path, b.offset, b.idx, b.tool_name FROM blocks b JOIN files f ON f.id = b.file_id "
          "ORDER BY 1, 2, 3")
    assert warm.execute(q3).fetchall() == cold.execute(q3).fetchall()


def test_target_views_compare_exactly_with_sqlite_datetimes(conn, tmp_path):
    # Claude Code writes 2026-11-23T08:00:01.000Z; datetime() gives
    # 2026-11-23 08:00:01. A reminder one minute past the cutoff must count
    # as older even on the boundary day.
    from datetime import datetime, timedelta, timezone
    from sessions import attachment
    now = datetime.now(timezone.utc)
    def stamp(d):
        return d.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    u = user("hi", None)
    old = attachment({"type": "task_reminder", "content": []}, u["uuid"])
    old["timestamp"] = stamp(now - timedelta(days=7, minutes=1))
    new = attachment({"type": "task_reminder", "content": []}, old["uuid"])
    new["timestamp"] = stamp(now - timedelta(days=6, hours=23, minutes=59))
    write(tmp_path / "projects" / "-p" / "s.jsonl", [u, old, new])
    refresh(conn, [tmp_path / "projects"])
    picked = conn.execute(
        "SELECT offset FROM attachment_targets WHERE type = 'task_reminder' "
        "AND age_days > 7").fetchall()
    first = conn.execute("SELECT offset FROM records WHERE uuid = ?", (old["uuid"],)).fetchone()
    assert picked == [first]


def test_chain_health_names_each_problem(conn, tmp_path):
    root = tmp_path / "projects"
    u = user("go", None, uid="u1", i=10)
    a = assistant([{"type": "tool_use", "id": "t-missing", "name": "Bash", "input": {}}], "u1", uid="a1", i=11)
    r = user([{"type": "tool_result", "tool_use_id": "t-orphan", "content": "x"}], "a1", uid="r1", i=12)
    late = user("earlier than its parent", "r1", uid="u2", i=5)  # timestamp out of order
    a2 = assistant("ok", "u2", uid="a2", i=13)
    stray = user("a second root", None, uid="u3", i=14)  # off the chain
    # the stray root comes first, so the leaf (the last line) is a2
    objs = [stray, u, a, r, late, a2]
    write(root / "-p" / "s.jsonl", objs)
    refresh(conn, [root])
    got = rows(conn, "SELECT line, problem, severity FROM chain_health ORDER BY problem, line")
    assert got == [
        {"line": 2, "problem": "extra_root", "severity": "note"},
        {"line": 4, "problem": "orphan_tool_result", "severity": "error"},
        {"line": 5, "problem": "timestamp_out_of_order", "severity": "note"},
        # mid-chain, resume drops the unanswered call: an error, as `txdb verify` says
        {"line": 3, "problem": "tool_use_without_result", "severity": "error"},
    ]
    assert ("tool_use_without_result", "error", 3) in {
        (f.code, f.severity, f.line) for f in verify_file(root / "-p" / "s.jsonl").findings}
    problems = rows(conn, "SELECT line, problem FROM chain_problems ORDER BY line")
    assert problems == [{"line": 3, "problem": "tool_use_without_result"},
                        {"line": 4, "problem": "orphan_tool_result"}]


def test_open_db_gives_a_sqlite_utils_database_of_the_catalog(tmp_path, projects):
    catalog = db.open_db(tmp_path / "c.db")
    refresh(catalog.conn, [projects])
    assert {"records", "blocks", "attachments", "usage", "sessions"} <= set(catalog.table_names())
    assert "session_costs" in catalog.view_names()
    assert catalog["records"].pks == ["file_id", "offset"]
    assert catalog["records"].count == catalog.execute("SELECT count(*) FROM records").fetchone()[0] > 0


def test_a_root_given_twice_or_inside_another_lists_each_file_once(conn, projects):
    inner = sorted(p for p in projects.iterdir() if p.is_dir())[0]
    n = len(list(projects.rglob("*.jsonl")))
    s = refresh(conn, [projects, projects, inner])
    assert (s.files, s.new, s.unchanged) == (n, n, 0)
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == n


def test_a_catalog_before_chain_timestamps_is_backfilled(catalog, db_path):
    # As a catalog written before migration 007 was: no chain.timestamp.
    expected = catalog.execute(
        "SELECT c.file_id, c.pos, r.timestamp FROM chain c JOIN records r "
        "ON r.file_id = c.file_id AND r.offset = c.offset ORDER BY 1, 2").fetchall()
    assert sum(ts is not None for _, _, ts in expected) > 100
    for (view,) in catalog.execute("SELECT name FROM sqlite_master WHERE type = 'view'").fetchall():
        catalog.execute(f'DROP VIEW "{view}"')
    catalog.execute("ALTER TABLE chain DROP COLUMN timestamp")
    catalog.execute("DELETE FROM _txdb_migrations WHERE name = '007_chain_timestamp'")
    c = db.connect(db_path)
    assert c.execute("SELECT file_id, pos, timestamp FROM chain ORDER BY 1, 2").fetchall() == expected
    c.close()


def test_side_files_of_a_session_folder_are_not_sessions(conn, tmp_path):
    sid = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
    project = tmp_path / "projects" / "-home-u-p"
    main = write(project / f"{sid}.jsonl", conversation(2, session=sid))
    side = write(project / sid / "resume-head.jsonl", conversation(1, session=sid))
    deep = write(project / sid / "other" / "x.jsonl", conversation(1, session=sid))
    agent = write(project / sid / "subagents" / "agent-a1.jsonl", conversation(1, session="agent-a1"))
    # An older txdb catalogued the side file as a second file of the session.
    store.refresh_path(conn, side, root=str(tmp_path / "projects"))
    assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 1
    s = refresh(conn, [tmp_path / "projects"])  # no --prune: it goes anyway
    paths = {r[0] for r in conn.execute("SELECT path FROM files")}
    assert paths == {str(main), str(agent)}
    assert s.pruned == 1
    assert conn.execute("SELECT count(*) FROM sessions WHERE session_id = ?", (sid,)).fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id "
                        "WHERE f.path = ?", (str(side),)).fetchone()[0] == 0
    assert side.exists() and deep.exists()  # only the catalog forgets them


# The session each transcript names, as `txdb sessions`, cost, doctor,
# restore and prune read it, for every live file.
NAMED = ("SELECT f.path, f.kind, f.session_id, s.session_id, s.parent_session_id FROM sessions s "
         "JOIN files f ON f.id = s.file_id WHERE f.gone = 0 ORDER BY f.path")
OTHER_SID = "0f0f0f0f-1111-2222-3333-444444444444"
_WORKTREES = DATA / "projects" / "-experiments-worktrees"
_REVIEW = DATA / "projects" / "-Users-dain-workspace-coderabbit-review-helper"
# (where in the tree, the real transcript its lines come from): an agent
# transcript beside the sessions (its parent: the sessionId its lines name),
# one in a session's subagents folder (its parent: the folder) and that
# session's own file (its id: the sessionId its lines name, else its name).
_PLACES = (
    ("-p/agent-1d78a5e5.jsonl", _REVIEW / "agent-1d78a5e5.jsonl"),
    ("-p/ef958aa1-0e93-49f0-bb71-150f63befcd1/subagents/agent-a4ca7529859c158c2.jsonl",
     _WORKTREES / "ef958aa1-0e93-49f0-bb71-150f63befcd1" / "subagents" / "agent-a4ca7529859c158c2.jsonl"),
    ("-p/ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl", _WORKTREES / "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"),
)


def _variant(line: bytes, how: str) -> bytes:
    """A real line as is ('real'), naming another session ('other') or none ('none')."""
    if how == "real":
        return line
    obj = orjson.loads(line)
    obj.pop("sessionId", None)
    if how == "other":
        obj["sessionId"] = OTHER_SID
    return orjson.dumps(obj) + b"\n"


def _lines_of(src: Path) -> list[bytes]:
    return [ln if ln.endswith(b"\n") else ln + b"\n" for ln in src.read_bytes().splitlines(keepends=True)]


def _play(root: Path, steps, warm) -> None:
    """Each step changes one file of the tree (append lines, truncate and
    regrow it, delete it), then an incremental refresh reads the tree, or
    that file alone (``by_path``: as the hook and ``--watch`` do)."""
    for n, (place, op, picks, *by_path) in enumerate(steps):
        rel, src = _PLACES[place]
        path = root / rel
        pool = _lines_of(src)
        data = b"".join(_variant(pool[i % len(pool)], how) for i, how in picks)
        path.parent.mkdir(parents=True, exist_ok=True)
        if op == "delete":
            path.unlink(missing_ok=True)
        else:
            with open(path, "wb" if op == "rewrite" else "ab") as fh:
                fh.write(data)
            # each write its own mtime: two writes of one size within a clock tick are another matter
            os.utime(path, ns=(n * 10**9, n * 10**9))
            if by_path and by_path[0]:
                store.refresh_path(warm, path, str(root))
                continue
        refresh(warm, [root])


def _assert_incremental_equals_fresh(tmp_path: Path, steps) -> None:
    root = tmp_path / "projects"
    shutil.rmtree(tmp_path, ignore_errors=True)
    root.mkdir(parents=True)
    warm = db.connect(tmp_path / "warm.db")
    _play(root, steps, warm)
    cold = db.connect(tmp_path / "cold.db")
    refresh(cold, [root])
    assert warm.execute(NAMED).fetchall() == cold.execute(NAMED).fetchall()
    warm.close()
    cold.close()


@pytest.mark.parametrize("steps", [
    # an appended line naming no session left the beside transcript no parent
    [(0, "append", [(0, "real")]), (0, "append", [(1, "none")])],
    # an appended line naming another session moved it to that one
    [(0, "append", [(0, "real")]), (0, "append", [(1, "other"), (0, "real")])],
    # its first lines name none: the first later line naming one is its parent
    [(0, "append", [(0, "none")]), (0, "append", [(1, "real")]), (0, "append", [(0, "other")])],
    # a session file whose first lines name no session kept its file name as id
    [(2, "append", [(0, "none")]), (2, "append", [(1, "other"), (2, "real")])],
    # truncated and regrown: read from the start again
    [(0, "append", [(0, "real")]), (0, "rewrite", [(0, "other")]), (0, "append", [(1, "real")])],
])
def test_the_session_a_transcript_names_is_its_first_line_naming_one_however_it_grew(tmp_path, steps):
    """Refreshed after each append, a transcript names the session a read
    from its start finds: the first of its lines naming one (its parent,
    for an agent transcript beside the sessions; its id, for a session
    file), whatever later lines name; a subagent's folder names its parent."""
    _assert_incremental_equals_fresh(tmp_path, steps)


_STEP = st.tuples(st.integers(0, len(_PLACES) - 1),
                  st.sampled_from(["append", "append", "append", "rewrite", "delete"]),
                  st.lists(st.tuples(st.integers(0, 60), st.sampled_from(["real", "real", "other", "none"])),
                           max_size=4),
                  st.booleans())


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_STEP, min_size=1, max_size=8))
def test_incremental_refreshes_name_the_sessions_a_fresh_build_does(tmp_path, steps):
    """Any sequence of appends, rewrites and deletions of an agent
    transcript beside the sessions, a subagent's and its session's file
    (the parent arriving before or after its agents, gone and back),
    each followed by an incremental refresh, leaves each transcript's
    session and parent as a fresh build of the final tree gives them."""
    _assert_incremental_equals_fresh(tmp_path / "t", steps)
