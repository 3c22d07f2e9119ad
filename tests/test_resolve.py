"""Which files are sessions, and how SESSION (an id, a prefix or a path)
finds one: backups and pending copies are read, never catalogued, never
changed; a symlinked session is one row; ids match literally."""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path

import pytest

from conftest import run as txdb
from sessions import conversation, write
from txdb.catalog import db
from txdb.catalog.ingest import store
from txdb.catalog.ingest.store import refresh


@pytest.fixture
def env(tmp_path, monkeypatch):
    root = tmp_path / "claude" / "projects"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    return root


run = partial(txdb, ok=True)  # run(..., ok=False) for a failing command


def one_error_line(r) -> str:
    """The output, which must be one `Error: ...` line (exit 1)."""
    assert r.exit_code == 1, r.output
    assert r.output.startswith("Error: ") and r.output.count("\n") == 1, r.output
    return r.output[:-1]


def paths(tmp_path) -> list[str]:
    conn = db.connect(tmp_path / "catalog.db")
    try:
        return [r[0] for r in conn.execute("SELECT path FROM files ORDER BY path")]
    finally:
        conn.close()


def session_with_big_result(path: Path, session: str) -> Path:
    objs = conversation(3, session=session)
    objs[2]["message"]["content"][0]["content"] = "z" * 40_000  # a result strip-all clears
    return write(path, objs)


# -- backups and pending copies (item 4, item 15) --------------------------------

def test_a_backup_is_read_by_verify_and_analyze_never_catalogued(env, tmp_path):
    sess = session_with_big_result(env / "-p" / "s1.jsonl", "s1")
    run("refresh")
    bak = sess.with_name("s1.jsonl.bak")
    bak.write_bytes(sess.read_bytes() + sess.read_bytes().splitlines(keepends=True)[0])  # differs
    v = run("verify", bak)
    assert str(bak) in v.output
    a = run("analyze", bak, "--json")
    report = json.loads(a.output)
    assert report["file"] == {"path": str(bak), "catalogued": False, "kind": "a backup", "copy_of": str(sess)}
    assert report["session"]["lines"] == 13
    assert f"Positions of {bak} (a backup of {sess}, read as it is; not catalogued)" in run("analyze", bak).output
    assert paths(tmp_path) == [str(sess)]


@pytest.mark.parametrize("command", [["strip-all"], ["strip-tools", "--tools", "Bash"], ["strip-thinking"],
                                     ["reset-usage"], ["fork"], ["snapshot"], ["apply"]])
def test_a_backup_is_never_a_surgery_target(env, tmp_path, command):
    sess = session_with_big_result(env / "-p" / "s1.jsonl", "s1")
    bak = sess.with_name("s1.jsonl.bak.2")
    bak.write_bytes(sess.read_bytes())
    before = sorted(os.listdir(sess.parent))
    line = one_error_line(run(command[0], bak, *command[1:], ok=False))
    assert line == f"Error: {bak} is a backup, not a session: txdb never changes it (name the session instead)"
    assert sorted(os.listdir(sess.parent)) == before
    assert bak.read_bytes() == sess.read_bytes()
    assert paths(tmp_path) == []


def test_a_file_in_tool_results_is_not_a_session(env, tmp_path):
    f = write(env / "-p" / "s1" / "tool-results" / "x.jsonl", conversation(1, session="t"))
    assert "not a session" not in run("verify", f).output
    assert json.loads(run("analyze", f, "--json").output)["file"]["catalogued"] is False
    assert one_error_line(run("strip-all", f, ok=False)) == (
        f"Error: {f} is a file inside a tool-results folder, not a session: txdb never changes it "
        "(name the session instead)")
    assert paths(tmp_path) == []


def test_analyze_of_the_pending_copy_reports_the_pending_copy(env, tmp_path):
    sess = session_with_big_result(env / "-p" / "s1.jsonl", "s1")
    run("strip-all", sess)
    pending = sess.with_name("s1.jsonl.pending")
    original = json.loads(run("analyze", sess, "--original", "--json").output)
    copy = json.loads(run("analyze", pending, "--json").output)
    assert json.loads(run("analyze", sess, "--json").output) == copy  # the session, read through its copy
    assert copy["file"]["kind"] == "the pending copy" and copy["file"]["path"] == str(pending)
    assert copy["session"]["file_bytes"] == pending.stat().st_size < original["session"]["file_bytes"]
    assert copy["session"]["chain_tokens"] < original["session"]["chain_tokens"] - 9000
    text = run("analyze", pending).output
    assert f"Positions of {pending} (the pending copy of {sess}: the file the next surgery edits" in text
    assert paths(tmp_path) == [str(sess)]
    # A mutating command given the pending copy goes on with it (its session).
    run("strip-tools", pending, "--tools", "Bash")
    assert paths(tmp_path) == [str(sess)]


def test_a_pending_copy_that_does_not_exist_is_said_so(env, tmp_path):
    sess = session_with_big_result(env / "-p" / "s1.jsonl", "s1")
    pending = sess.with_name("s1.jsonl.pending")
    for command in ("verify", "analyze", "strip-all", "apply"):
        assert one_error_line(run(command, pending, ok=False)) == (
            f"Error: no pending copy at {pending} (the original is {sess}; a surgery command or "
            "`txdb snapshot` makes one)"), command


def test_prune_removes_backup_rows_an_older_txdb_catalogued(env, tmp_path):
    sess = session_with_big_result(env / "-p" / "s1.jsonl", "s1")
    bak = sess.with_name("s1.jsonl.bak")
    bak.write_bytes(sess.read_bytes())
    pending = sess.with_name("s1.jsonl.pending")
    pending.write_bytes(sess.read_bytes())
    run("refresh")
    conn = db.connect(tmp_path / "catalog.db")
    store.refresh_path(conn, bak)  # as `txdb verify X.jsonl.bak` did before
    store.refresh_path(conn, pending)
    conn.close()
    assert len(paths(tmp_path)) == 3
    # The session still resolves by id to the session, not to its copies' rows.
    assert json.loads(run("analyze", "s1", "--original", "--json").output)["file"]["path"] == str(sess)
    out = json.loads(run("refresh", "--json").output)
    assert out["pruned"] == 0 and len(paths(tmp_path)) == 3
    out = json.loads(run("prune", "--all-gone", "--yes", "--json").output)
    assert out["files"] == 2 and paths(tmp_path) == [str(sess)]
    conn = db.connect(tmp_path / "catalog.db")
    orphans = conn.execute("SELECT count(*) FROM records WHERE file_id NOT IN (SELECT id FROM files)").fetchone()
    conn.close()
    assert orphans == (0,)


# -- symlinked sessions (item 5) -------------------------------------------------

def test_a_symlinked_session_is_one_row_under_the_path_discovery_found(env, tmp_path):
    real = session_with_big_result(tmp_path / "elsewhere" / "real.jsonl", "s9")
    link = env / "-home-me-app" / "s9.jsonl"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    run("refresh")
    assert paths(tmp_path) == [str(link)]
    for given in (real, link, "s9"):
        report = json.loads(run("analyze", given, "--json").output)
        assert report["file"]["path"] == str(link)
        assert report["session"]["project"] == "-home-me-app"
    conn = db.connect(tmp_path / "catalog.db")
    store.refresh_path(conn, real)  # what apply does after writing through the link
    conn.close()
    assert paths(tmp_path) == [str(link)]


@pytest.mark.parametrize("replaced", [False, True], ids=["same-file", "target-replaced"])
def test_a_target_catalogued_first_is_taken_over_by_the_link_discovery_finds(env, tmp_path, replaced):
    real = session_with_big_result(tmp_path / "elsewhere" / "real.jsonl", "s9")
    run("analyze", real)  # catalogued under its own path first
    assert paths(tmp_path) == [str(real)]
    if replaced:  # a new file (a new inode) at the target's path, as a rename writes it
        tmp = real.with_name("tmp")
        tmp.write_bytes(real.read_bytes())
        os.replace(tmp, real)
    link = env / "-home-me-app" / "s9.jsonl"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    out = json.loads(run("refresh", "--json").output)
    assert out["new"] == 0 and out["unchanged"] + out["rewritten"] == 1
    assert paths(tmp_path) == [str(link)]
    report = json.loads(run("analyze", "s9", "--json").output)
    assert report["session"]["project"] == "-home-me-app"


def test_a_link_beside_its_target_is_one_row_the_real_path(env, tmp_path):
    real = session_with_big_result(env / "-p" / "s1.jsonl", "s1")
    (env / "-q").mkdir()
    (env / "-q" / "s1.jsonl").symlink_to(real)
    conn = db.connect(tmp_path / "catalog.db")
    stats = refresh(conn, [env])
    conn.close()
    assert stats.new == 1 and paths(tmp_path) == [str(real)]


# -- ids and prefixes match literally --------------------------------------------

@pytest.fixture
def two_sessions(env, tmp_path):
    for sid in ("5bcd1111-aaaa", "ab_d2222-bbbb", "abxd3333-cccc"):
        write(env / "-p" / f"{sid}.jsonl", conversation(1, session=sid))
    return env


@pytest.mark.parametrize("ref", ["*", "[5b]*", "%x%", "%", "_", "ab?d*", "%1111-aaaa", "5bcd_111"])
def test_patterns_match_nothing(two_sessions, tmp_path, ref):
    run("refresh", "--root", tmp_path / "empty")  # a catalog without them: analyze reads one, never makes it
    for catalogued in (False, True):  # found on disk under the roots, then in the catalog
        r = run("analyze", ref, ok=False)
        why = "an id prefix needs at least 4 characters" if len(ref) < 4 else "run `txdb refresh`?"
        assert one_error_line(r) == f"Error: no session {ref!r} in the catalog ({why})"
        run("refresh")


def test_prefixes_and_ids_match_literally(two_sessions):
    run("refresh")
    for ref, sid in (("ab_d", "ab_d2222-bbbb"), ("abxd", "abxd3333-cccc"), ("5bcd", "5bcd1111-aaaa"),
                     ("ab_d2222-bbbb", "ab_d2222-bbbb")):
        assert json.loads(run("analyze", ref, "--json").output)["session"]["session_id"] == sid


def test_surgery_by_the_target_path_of_a_symlinked_session_keeps_one_row(env, tmp_path):
    real = session_with_big_result(tmp_path / "elsewhere" / "real.jsonl", "s9")
    link = env / "-home-me-app" / "s9.jsonl"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    run("refresh")
    run("strip-all", real)
    run("apply", real)
    assert paths(tmp_path) == [str(link)]
    report = json.loads(run("analyze", "s9", "--json").output)
    assert report["session"]["project"] == "-home-me-app" and report["file"]["path"] == str(link)
    assert report["session"]["file_bytes"] < 40_000  # the catalog saw the applied result
    conn = db.connect(tmp_path / "catalog.db")
    logged = conn.execute("SELECT DISTINCT s.file_id, f.path FROM surgeries s LEFT JOIN files f ON f.id = s.file_id")
    assert logged.fetchall() == [(report["session"]["file_id"], str(link))]
    conn.close()


def test_the_pending_name_of_a_symlinked_session_finds_its_copy(env, tmp_path):
    """A session linked from another folder is worked on by its target's own
    path (its pending copy beside the target); the link's `.pending` name
    still names that copy for readers, and apply through it is refused."""
    real = session_with_big_result(tmp_path / "elsewhere" / "real.jsonl", "s9")
    link = env / "-home-me-app" / "s9.jsonl"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    run("strip-all", real)
    copy = f"{link}.pending"
    assert not Path(copy).exists() and Path(f"{real}.pending").is_file()
    assert run("verify", copy).output.startswith("OK: ")
    assert json.loads(run("analyze", copy, "--json").output)["file"]["path"] == f"{real}.pending"
    r = run("apply", copy, ok=False)
    assert one_error_line(r).startswith(f"Error: {link} is a symlink to {real}, in another folder")
    assert Path(f"{real}.pending").is_file()
    run("apply", real)
    assert link.is_symlink() and not Path(f"{real}.pending").exists()
    r = run("apply", f"{real}.pending", ok=False)
    assert one_error_line(r).startswith(f"Error: no pending copy at {real}.pending")


def test_a_link_named_like_a_session_to_a_backup_is_a_backup(env, tmp_path):
    """A symlink `x.jsonl` pointing at a `.bak` must not let a surgery rewrite the
    backup, nor put the backup in the catalog."""
    sess = session_with_big_result(env / "-p" / "s1.jsonl", "s1")
    run("strip-all", sess, "--apply")
    bak = Path(f"{sess}.bak")
    kept = bak.read_bytes()
    link = env / "-p" / "s2.jsonl"
    link.symlink_to(bak)
    outside = tmp_path / "elsewhere.jsonl"
    outside.symlink_to(bak)
    for ref in (link, outside):
        for command in (("compact-range", ref, "--from", 1, "--to", 2), ("strip-all", ref), ("apply", ref)):
            r = run(*command, ok=False)
            assert one_error_line(r) == (f"Error: {ref} is a link to {bak}, which is a backup, not a session: "
                                         "txdb never changes it (name the session instead)"), command
    run("refresh")
    assert bak.read_bytes() == kept and not Path(f"{bak}.pending").exists()
    assert paths(tmp_path) == [str(sess)]


def test_a_folder_or_another_file_given_to_a_surgery_says_what_it_is(env, tmp_path):
    folder = env / "-p"
    folder.mkdir(parents=True)
    other = tmp_path / "notes.txt"
    other.write_text("x")
    for ref, kind in ((folder, "a folder"), (other, "a file not named <id>.jsonl")):
        r = run("strip-all", ref, ok=False)
        assert one_error_line(r) == f"Error: {ref} is {kind}, not a session: txdb never changes it " \
                                    "(name the session instead)"


# -- a pass reads the file, not the catalog (issue 19, speed) --------------------

def _indexed_size(tmp_path, path) -> int | None:
    conn = db.connect(tmp_path / "catalog.db")
    try:
        row = conn.execute("SELECT size FROM files WHERE path = ?", (str(path),)).fetchone()
        return row[0] if row else None
    finally:
        conn.close()


def test_a_pass_that_writes_a_pending_copy_does_not_index_the_session_first(env, tmp_path):
    """Indexing a 100 MB session the catalog lacked took twice the strip-all
    pass itself (and 1.5x its memory): the pass reads the file, so only apply,
    whose swap the catalog must see, indexes it."""
    s = session_with_big_result(env / "-home-me-app" / "s7.jsonl", "s7")
    run("strip-all", s)
    assert Path(f"{s}.pending").is_file()
    assert paths(tmp_path) == []
    run("strip-tools", "s7", "--dry-run")  # by id: found under the projects root, still not indexed
    assert paths(tmp_path) == []
    run("apply", s)
    assert paths(tmp_path) == [str(s)] and _indexed_size(tmp_path, s) == s.stat().st_size
    report = json.loads(run("analyze", "s7", "--json").output)
    assert report["session"]["file_bytes"] < 40_000  # the catalog saw the applied result


def test_a_pass_on_a_session_that_grew_leaves_its_rows_to_apply(env, tmp_path):
    s = session_with_big_result(env / "-home-me-app" / "s8.jsonl", "s8")
    run("refresh")
    indexed = _indexed_size(tmp_path, s)
    with open(s, "ab") as fh:
        fh.write(json.dumps({"type": "custom-title", "customTitle": "grown", "sessionId": "s8"}).encode() + b"\n")
    run("strip-all", "s8")
    assert _indexed_size(tmp_path, s) == indexed  # not refreshed for the pass
    run("apply", "s8")
    assert _indexed_size(tmp_path, s) == s.stat().st_size


def test_strip_all_apply_in_one_go_indexes_the_session(env, tmp_path):
    s = session_with_big_result(env / "-home-me-app" / "s6.jsonl", "s6")
    run("strip-all", s, "--apply")
    assert paths(tmp_path) == [str(s)] and _indexed_size(tmp_path, s) == s.stat().st_size


# -- a file's name, not its path: `SESSION.jsonl.pending` as the README writes it -

def test_a_session_or_pending_copy_named_by_its_file_name_from_any_folder(env, tmp_path, monkeypatch):
    sid = "1fb5e404-604d-4a2b-baf1-3beb42a67371"
    sess = session_with_big_result(env / "-p" / f"{sid}.jsonl", sid)
    run("refresh")
    monkeypatch.chdir(tmp_path)  # not the session's folder
    r = run("verify", "1fb5e404.jsonl.pending", ok=False)
    assert one_error_line(r).startswith(f"Error: no pending copy at {sess}.pending")
    run("strip-all", sid)
    pending = sess.with_name(sess.name + ".pending")
    assert pending.is_file()
    for name in ("1fb5e404.jsonl.pending", f"{sid}.jsonl.pending"):
        v = run("verify", name)
        assert v.output.startswith(f"OK: {pending}:"), v.output
    for name in ("1fb5e404.jsonl", f"{sid}.jsonl"):
        assert run("verify", name).output.startswith(f"OK: {sess}:")
        assert run("analyze", name, "--original").output.startswith(f"Session {sid}  ({sess})")
    before = pending.read_bytes()
    run("strip-all", "1fb5e404.jsonl.pending")  # a mutating command: the session, through its pending copy
    assert pending.read_bytes() == before  # nothing more to strip: the copy is as it was
    r = run("verify", "0ddba11.jsonl.pending", ok=False)
    assert one_error_line(r) == (
        "Error: no session '0ddba11.jsonl.pending': looked for a session whose id, id prefix or file name "
        f"is '0ddba11' in the catalog and for 0ddba11.jsonl in the project folders of {env}, and in the "
        "working folder (run `txdb refresh`, or pass the file's path)")


def test_a_pending_copy_named_from_its_own_folder_is_that_file(env, tmp_path, monkeypatch):
    # From the session's folder the name is the file there (it was an error:
    # only names ending in .jsonl were taken as the working folder's).
    sid = "1fb5e404-604d-4a2b-baf1-3beb42a67371"
    sess = session_with_big_result(env / "-p" / f"{sid}.jsonl", sid)
    run("refresh")
    run("strip-all", sid)
    pending = sess.with_name(sess.name + ".pending")
    monkeypatch.chdir(sess.parent)
    assert run("verify", pending.name).output.startswith("OK: "), pending
    assert run("apply", sid + ".jsonl").exit_code == 0
    assert not pending.exists()
