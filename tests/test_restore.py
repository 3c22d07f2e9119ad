"""The catalog as an archive: each file's sha256, the sidecars kept once
each, `txdb sessions --gone`, and `txdb restore` giving a deleted session
back byte for byte (or refusing, with nothing written)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import copy_fixture_sessions, rows, run
from txdb.catalog import db
from txdb.catalog.ingest import chunks
from txdb.catalog.ingest.store import refresh

SUBAGENT_DEMO = "-tmp-txdb-cli-fixtures-subagent-demo"
SID = "417214f1-6c0e-4027-bf91-3e2fe84fe3fd"
DATA_CLI = Path(__file__).resolve().parent / "data" / "cli" / SUBAGENT_DEMO


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> sha256), links and temp files included."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath, name)
            out[str(p.relative_to(root))] = "link" if p.is_symlink() else sha(p)
    return out


@pytest.fixture
def archive(tmp_path, monkeypatch):
    """The subagent demo session with a tool result and a persisted file in
    its folder, catalogued (TXDB_DB), and the sha256 of every file of it."""
    projects = copy_fixture_sessions(tmp_path / "projects")
    sdir = projects / SUBAGENT_DEMO / SID
    (sdir / "tool-results").mkdir()
    (sdir / "tool-results" / "toolu_01.txt").write_bytes(b"a large tool output\n" * 500)
    (sdir / "persisted" / "thinking").mkdir(parents=True)
    (sdir / "persisted" / "thinking" / "u1.txt").write_bytes("thinking, é\n".encode() * 50)
    (sdir / "persisted" / "text").mkdir()
    (sdir / "persisted" / "text" / "same.txt").write_bytes(b"a large tool output\n" * 500)  # same bytes
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    run("refresh", "--root", projects, ok=True)
    before = tree(projects / SUBAGENT_DEMO)
    return projects, before


def _conn(tmp_path):
    return db.connect(tmp_path / "catalog.db")


def _sweep(projects: Path) -> None:
    """What Claude Code's cleanup does: the session file and its folder go."""
    (projects / SUBAGENT_DEMO / f"{SID}.jsonl").unlink()
    shutil.rmtree(projects / SUBAGENT_DEMO / SID)


def _one_error(r) -> str:
    assert r.exit_code != 0
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert "Traceback" not in r.output
    return lines[0]


# -- 1. proof of byte identity ----------------------------------------------

def test_refresh_records_each_files_sha256_and_follows_growth(tmp_path):
    conn = db.connect(tmp_path / "c.db")
    projects = copy_fixture_sessions(tmp_path / "projects")
    refresh(conn, [projects])
    got = dict(conn.execute("SELECT path, sha256 FROM files"))
    assert got and all(v == sha(Path(p)) for p, v in got.items())
    f = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    with open(f, "ab") as fh:
        fh.write(b'{"type":"last-prompt","lastPrompt":"x","sessionId":"' + SID.encode() + b'"}\n')
    stats = refresh(conn, [projects])
    assert stats.grown == 1
    assert conn.execute("SELECT sha256 FROM files WHERE path = ?", (str(f),)).fetchone()[0] == sha(f)


def test_an_older_catalog_gets_its_hashes_on_the_next_refresh(tmp_path):
    conn = db.connect(tmp_path / "c.db")
    projects = copy_fixture_sessions(tmp_path / "projects")
    refresh(conn, [projects])
    conn.execute("UPDATE files SET sha256 = NULL")  # as migration 017 leaves older rows
    conn.commit()
    stats = refresh(conn, [projects])
    assert stats.new == stats.grown == stats.rewritten == 0
    assert all(v == sha(Path(p)) for p, v in conn.execute("SELECT path, sha256 FROM files"))


def test_every_shipped_file_is_rebuilt_byte_for_byte_from_its_records(tmp_path):
    """rebuild() over every catalogued fixture: a file it cannot make whole
    must be one the hash check then refuses (never a silent difference)."""
    from txdb.surgery import restore
    conn = db.connect(tmp_path / "c.db")
    projects = copy_fixture_sessions(tmp_path / "projects")
    refresh(conn, [projects])
    whole = 0
    for fid, path, digest in conn.execute("SELECT id, path, sha256 FROM files").fetchall():
        data = restore.rebuild_whole(conn, fid, digest)
        if data is not None:
            assert data == Path(path).read_bytes()
            whole += 1
    total = conn.execute("SELECT count(*) FROM files").fetchone()[0]
    assert whole == total, f"{total - whole} of {total} fixture files not rebuilt whole"


@pytest.mark.parametrize("ending, blank", [(b"\r\n", b""), (b"\n", b"\n"), (b"\r\n", b"\r\n")])
def test_line_endings_and_blank_lines_come_back_as_they_were(tmp_path, monkeypatch, ending, blank):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    src = projects_dir = tmp_path / "projects"
    proj = projects_dir / "-home-me-app"
    proj.mkdir(parents=True)
    lines = [x for x in (DATA_CLI / f"{SID}.jsonl").read_bytes().split(b"\n") if x]
    f = proj / f"{SID}.jsonl"
    f.write_bytes(b"".join(line + ending + blank for line in lines))
    original = f.read_bytes()
    run("refresh", "--root", src, ok=True)
    f.unlink()
    run("refresh", "--root", src, ok=True)
    run("restore", SID, "--root", src, ok=True)
    assert f.read_bytes() == original



@pytest.mark.parametrize("middle", [b"\r\n", b"\n"])
def test_the_line_ending_is_chosen_without_a_second_pass_only_where_both_rebuild_alike(tmp_path, monkeypatch,
                                                                                      middle):
    """A file of LF lines, one line in its middle ended by ``middle``: its
    first and last bytes fit both endings; only the all-LF file is chosen
    from the catalog alone (``likely_newline``), the mixed one still hashes
    whole, and both come back byte for byte."""
    from txdb.surgery.restore import likely_newline

    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    proj = tmp_path / "projects" / "-home-me-app"
    proj.mkdir(parents=True)
    lines = [x for x in (DATA_CLI / f"{SID}.jsonl").read_bytes().split(b"\n") if x]
    assert sum(map(len, lines[:len(lines) // 2])) > 4096 and len(lines[-1]) > 256  # the middle is in neither
    f = proj / f"{SID}.jsonl"
    f.write_bytes(b"".join(line + (middle if i == len(lines) // 2 else b"\n") for i, line in enumerate(lines)))
    original = f.read_bytes()
    run("refresh", "--root", tmp_path / "projects", ok=True)
    conn = _conn(tmp_path)
    fid = conn.execute("SELECT id FROM files WHERE path = ?", (str(f),)).fetchone()[0]
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    assert likely_newline(conn, fid) == (b"\n" if middle == b"\n" else None)
    # an all-LF file is told from its sums alone, without reading every record
    assert any("lag(" in q for q in statements) == (middle != b"\n")
    conn.close()
    f.unlink()
    run("refresh", "--root", tmp_path / "projects", ok=True)
    run("restore", SID, "--root", tmp_path / "projects", ok=True)
    assert f.read_bytes() == original

# -- 2. sidecars ---------------------------------------------------------------

def test_sidecars_are_catalogued_once_each_and_refreshed_incrementally(archive, tmp_path):
    projects, _ = archive
    conn = _conn(tmp_path)
    got = {r["rel"]: r for r in rows(conn, "SELECT * FROM sidecars WHERE path LIKE ?", (f"%{SID}%",))}
    assert set(got) == {"tool-results/toolu_01.txt", "persisted/thinking/u1.txt", "persisted/text/same.txt",
                        "subagents/agent-af2f709f0345e1da9.meta.json"}
    assert {r["session_id"] for r in got.values()} == {SID}
    sdir = projects / SUBAGENT_DEMO / SID
    for rel, r in got.items():
        assert r["sha256"] == sha(sdir / rel) and r["size"] == (sdir / rel).stat().st_size
    # Same bytes stored once, compressed.
    assert conn.execute("SELECT count(DISTINCT sha256) FROM sidecars WHERE session_id = ?", (SID,)).fetchone()[0] == 3
    assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == \
        conn.execute("SELECT count(DISTINCT sha256) FROM sidecars").fetchone()[0]
    stored, size = conn.execute("SELECT length(data), size FROM blobs WHERE sha256 = ?",
                                (got["tool-results/toolu_01.txt"]["sha256"],)).fetchone()
    assert stored < size / 10
    view = rows(conn, "SELECT * FROM sidecars_by_session WHERE session_id = ?", (SID,))
    assert view[0]["sidecars"] == 4 and view[0]["bytes"] == sum(r["size"] for r in got.values())
    assert view[0]["file_id"] == conn.execute("SELECT id FROM files WHERE path LIKE ?",
                                              (f"%/{SID}.jsonl",)).fetchone()[0]
    # Unchanged: skipped; changed: read again.
    assert "sidecar" not in run("refresh", ok=True).output
    (sdir / "persisted" / "thinking" / "u1.txt").write_bytes(b"changed")
    assert "1 sidecar file kept" in run("refresh", ok=True).output
    assert conn.execute("SELECT sha256 FROM sidecars WHERE rel = 'persisted/thinking/u1.txt'").fetchone()[0] \
        == hashlib.sha256(b"changed").hexdigest()


def test_prune_forgets_vanished_sidecars_and_their_contents(archive, tmp_path):
    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    conn = _conn(tmp_path)
    assert conn.execute("SELECT count(*) FROM sidecars WHERE gone = 1 AND gone_at IS NOT NULL").fetchone()[0] == 4
    run("prune", "--all-gone", "--yes", ok=True)
    assert conn.execute("SELECT count(*) FROM sidecars WHERE session_id = ?", (SID,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM sidecars").fetchone()[0] == 1  # the other session's, kept
    assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1


def test_a_subagent_transcript_named_to_prune_or_restore_says_it_was_taken_as_its_session(archive, tmp_path):
    """A live subagent transcript's path (or name) whose session file is
    gone stands for that session: prune and restore say so, in text and
    JSON; a name of the session itself adds no note."""
    projects, _ = archive
    session = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    session.unlink()
    run("refresh", ok=True)
    (agent,) = (projects / SUBAGENT_DEMO / SID / "subagents").glob("*.jsonl")
    for ref in (str(agent), agent.stem):
        out = run("prune", ref, "--dry-run", ok=True).output
        assert f"{ref} was taken as session {SID} ({session})" in out, out
        got = json.loads(run("prune", ref, "--dry-run", "--json", ok=True).output)
        assert got["taken_as"] == [{"named": ref, "session_id": SID, "session_path": str(session)}], got
        out = run("restore", ref, "--dry-run", ok=True).output
        assert f"{ref} was taken as session {SID} ({session})" in out, out
        got = json.loads(run("restore", ref, "--dry-run", "--json", ok=True).output)
        assert got["taken_as"] == [{"named": ref, "session_id": SID, "session_path": str(session)}], got
    for ref in (str(session), SID[:8]):
        assert "taken as" not in run("prune", ref, "--dry-run", ok=True).output
        assert json.loads(run("prune", ref, "--dry-run", "--json", ok=True).output)["taken_as"] == []
        assert "taken as" not in run("restore", ref, "--dry-run", ok=True).output
    out = run("prune", str(agent), ok=True).output
    assert "was taken as session" in out and "deleted the archive of 1 session" in out, out
    assert agent.exists()  # the live transcript stays, in the catalog too
    assert _conn(tmp_path).execute("SELECT gone FROM files WHERE path = ?", (str(agent),)).fetchone() == (0,)


def _cost_total() -> float:
    return json.loads(run("cost", "--since", "2000-01-01", "--json", ok=True).output)["total"]["cost_usd"]


def test_gone_is_listed_once_a_refresh_saw_it_and_prune_drops_its_cost_as_the_help_says(archive, tmp_path):
    """What the docs say of the archive: `sessions --gone` lists a deleted
    session only once a refresh has seen it gone; `prune` deletes its usage
    rows too, so `txdb cost` totals drop."""
    projects, _ = archive
    assert "once a refresh sees it gone" in " ".join(run("sessions", "--help", ok=True).output.split())
    assert "its totals drop" in " ".join(run("prune", "--help", ok=True).output.split())
    before = _cost_total()
    _sweep(projects)
    assert json.loads(run("sessions", "--gone", "--json", ok=True).output) == []  # not seen gone yet
    run("refresh", ok=True)
    assert [r["session_id"] for r in json.loads(run("sessions", "--gone", "--json", ok=True).output)] == [SID]
    assert _cost_total() == before  # gone, still counted: the archive holds it
    run("prune", SID, ok=True)
    assert 0 <= _cost_total() < before


# -- 4. sessions --gone ------------------------------------------------------

def test_refresh_counts_sessions_gone_and_sessions_gone_lists_them(archive, tmp_path):
    projects, _ = archive
    assert run("sessions", "--gone", "--json", ok=True).output.strip() == "[]"
    _sweep(projects)
    out = run("refresh", ok=True).output
    assert "2 gone (1 session and 1 subagent transcript newly gone: txdb sessions --gone)" in out
    assert "newly gone" not in run("refresh", ok=True).output  # counted once
    import json
    listed = json.loads(run("sessions", "--gone", "--json", ok=True).output)
    assert [r["session_id"] for r in listed] == [SID]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", listed[0]["gone_at"]), listed[0]["gone_at"]
    assert listed[0]["subagents_gone"] == 1
    with _conn(tmp_path) as conn:
        assert {g for (g,) in conn.execute("SELECT gone_at FROM files WHERE gone = 1")} == {listed[0]["gone_at"]}
        sidecar_gone = {g for (g,) in conn.execute("SELECT gone_at FROM sidecars WHERE gone = 1")}
        assert sidecar_gone and all(re.fullmatch(r"\S+T\S+Z", g) for g in sidecar_gone)
    table = run("sessions", "--gone", "--table", ok=True).output.splitlines()
    assert table[0].split()[:3] == ["session_id", "what", "gone"] and SID in table[2]
    assert re.split(r"\s{2,}", table[2])[1:3] == [  # the session file and its subagent transcript
        "session", f"2 files, {listed[0]['gone_lines']:,} lines, {listed[0]['gone_bytes']:,} bytes"]
    with _conn(tmp_path) as conn:  # as an older txdb wrote it
        conn.execute("UPDATE files SET gone_at = '2026-12-01 14:53:32' WHERE gone = 1")
    listed = json.loads(run("sessions", "--gone", "--json", ok=True).output)
    assert listed[0]["gone_at"] == "2026-12-01T14:53:32Z"


# -- 3. restore ----------------------------------------------------------------

def test_restore_gives_a_swept_session_back_byte_for_byte(archive):
    projects, before = archive
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in (projects / SUBAGENT_DEMO).rglob("*") if p.is_file()}
    _sweep(projects)
    run("refresh", ok=True)
    dry = run("restore", SID[:8], "--dry-run", ok=True)
    assert "would write" in dry.output and "nothing written" in dry.output
    assert not (projects / SUBAGENT_DEMO / f"{SID}.jsonl").exists()
    r = run("restore", SID[:8], ok=True)
    assert "1 session, 6 files, 6 written" in r.output
    assert run("sessions", "--gone", "--json", ok=True).output.strip() == "[]"  # no refresh needed
    assert tree(projects / SUBAGENT_DEMO) == before
    for p in (projects / SUBAGENT_DEMO).rglob("*"):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else modes[p]), p  # a file's mode as catalogued
    assert "newly gone" not in run("refresh", ok=True).output
    assert run("sessions", "--gone", "--json", ok=True).output.strip() == "[]"


def test_restore_by_where_and_to_another_folder_beside_a_live_session(archive, tmp_path):
    projects, before = archive
    err = _one_error(run("restore", SID))
    assert "exists: the session is still there" in err
    assert tree(projects / SUBAGENT_DEMO) == before
    dest = tmp_path / "elsewhere" / SUBAGENT_DEMO
    run("restore", "--where", f"session_id = '{SID}'", "--to", dest, ok=True)
    assert tree(dest) == before
    assert tree(projects / SUBAGENT_DEMO) == before


def test_a_surgery_changed_session_is_restored_as_it_is_now(archive):
    projects, _ = archive
    f = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    run("strip-tools", SID, ok=True)
    run("apply", SID, ok=True)
    now = sha(f)
    backups = {p.name: sha(p) for p in f.parent.glob(f"{SID}.jsonl.bak*")}
    assert backups
    f.unlink()
    shutil.rmtree(projects / SUBAGENT_DEMO / SID)
    run("refresh", ok=True)
    run("restore", SID, ok=True)
    assert sha(f) == now
    assert {p.name: sha(p) for p in f.parent.glob(f"{SID}.jsonl.bak*")} == backups


# -- 5. bad input --------------------------------------------------------------

def test_an_unknown_session_is_one_error_line(archive):
    assert "no session" in _one_error(run("restore", "ffffffff-0000"))
    assert "matched no session" in _one_error(run("restore", "--where", "session_id = 'nope'"))
    assert "Usage" in run("restore").output


def test_a_file_the_catalog_cannot_give_back_whole_is_named_and_nothing_written(archive, tmp_path):
    projects, _ = archive
    f = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    with open(f, "ab") as fh:
        fh.write(b"this line is not json\n")
    run("refresh", ok=True)
    _sweep(projects)
    run("refresh", ok=True)
    err = _one_error(run("restore", SID))
    assert "cannot give back whole" in err and f"{SID}.jsonl" in err and "nothing was written" in err
    # the cause named: the line that did not parse, not the sha256
    assert "did not parse" in err and "sha256" not in err.split(f"{SID}.jsonl", 1)[1].split(";")[0]
    assert tree(projects / SUBAGENT_DEMO) == {}


def test_rows_an_older_catalog_kept_without_a_hash_are_refused(archive, tmp_path):
    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    conn = _conn(tmp_path)
    conn.execute("UPDATE files SET sha256 = NULL WHERE kind = 'subagent'")
    conn.commit()
    err = _one_error(run("restore", SID))
    assert "agent-af2f709f0345e1da9.jsonl" in err and "no sha256" in err
    assert tree(projects / SUBAGENT_DEMO) == {}


def test_a_target_that_is_a_file_or_a_link_is_refused(archive, tmp_path):
    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    afile = tmp_path / "afile"
    afile.write_bytes(b"x")
    assert "is a file, not a folder" in _one_error(run("restore", SID, "--to", afile))
    assert afile.read_bytes() == b"x"
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert "symlink" in _one_error(run("restore", SID, "--to", link))
    assert tree(real) == {}
    # A link in the way inside the session's folder.
    (projects / SUBAGENT_DEMO / SID).symlink_to(real)
    assert "symlink" in _one_error(run("restore", SID))
    assert tree(real) == {} and not (projects / SUBAGENT_DEMO / f"{SID}.jsonl").exists()


def _mount(args: list[str]) -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def test_a_full_disk_leaves_nothing_half_written(archive, tmp_path):
    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    mnt = tmp_path / "small"
    mnt.mkdir()
    if not _mount(["-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mnt)]):
        pytest.skip("cannot mount a small tmpfs here")
    try:
        err = _one_error(run("restore", SID, "--to", mnt / SUBAGENT_DEMO))
        assert "No space left on device" in err and "nothing was changed" in err
        assert list(mnt.rglob("*")) == []  # no file, nor a folder it made
    finally:
        subprocess.run(["umount", str(mnt)])


def test_a_grown_files_hash_resumes_from_its_stored_state(tmp_path):
    """The running state refresh stores resumes to hashlib's digest, so a
    grown file is hashed from its old size on, never read again."""
    from txdb.catalog.ingest import sha as shamod

    if shamod.new(b"\0" * shamod.CTX_BYTES) is None:
        pytest.skip("no resumable SHA-256 backend here (a grown file is hashed from its start)")
    data = os.urandom(300_000)
    for cut in (0, 1, 63, 64, 65, 4097, 299_999):
        h = shamod.new()
        h.update(data[:cut])
        resumed = shamod.new(h.state)
        resumed.update(data[cut:])
        assert resumed.hexdigest() == hashlib.sha256(data).hexdigest()
    conn = db.connect(tmp_path / "c.db")
    projects = copy_fixture_sessions(tmp_path / "projects")
    refresh(conn, [projects])
    f = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    (state,) = conn.execute("SELECT sha_state FROM files WHERE path = ?", (str(f),)).fetchone()
    assert state is not None and len(state) == shamod.CTX_BYTES
    for _ in range(3):
        with open(f, "ab") as fh:
            fh.write(b'{"type":"last-prompt","lastPrompt":"x","sessionId":"' + SID.encode() + b'"}\n')
        assert refresh(conn, [projects]).grown == 1
        assert conn.execute("SELECT sha256 FROM files WHERE path = ?", (str(f),)).fetchone()[0] == sha(f)


def test_refreshing_one_session_keeps_its_folders_files_too(tmp_path):
    """The plugin's hook and `refresh --watch` refresh one file: the files
    its session's folder gained meanwhile are kept as well."""
    from txdb.catalog.ingest.store import refresh_path

    conn = db.connect(tmp_path / "c.db")
    projects = copy_fixture_sessions(tmp_path / "projects")
    refresh(conn, [projects])
    f = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    (projects / SUBAGENT_DEMO / SID / "tool-results").mkdir()
    (projects / SUBAGENT_DEMO / SID / "tool-results" / "toolu_9.txt").write_bytes(b"late output")
    with open(f, "ab") as fh:
        fh.write(b'{"type":"last-prompt","lastPrompt":"x","sessionId":"' + SID.encode() + b'"}\n')
    assert refresh_path(conn, f, str(projects)) == "grown"
    assert conn.execute("SELECT sha256 FROM sidecars WHERE rel = 'tool-results/toolu_9.txt'").fetchone()[0] \
        == hashlib.sha256(b"late output").hexdigest()


def test_a_gone_session_keeps_its_archive_when_another_file_takes_its_path(archive, tmp_path):
    """The catalog's rows of a gone session are its only copy: a different
    file later at that path is indexed as a file of its own, and restore
    gives the gone version back (refusing while that file is in the way)."""
    projects, before = archive
    session = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    conn = _conn(tmp_path)
    (n_records,) = conn.execute("SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id "
                                "WHERE f.path = ?", (str(session),)).fetchone()
    conn.close()
    assert n_records > 0
    _sweep(projects)
    run("refresh", ok=True)
    session.write_bytes(b"{}\n")
    run("refresh", ok=True)
    conn = _conn(tmp_path)
    kept = rows(conn, "SELECT f.id, f.gone, count(r.offset) AS n FROM files f JOIN records r ON r.file_id = f.id "
                      "WHERE f.session_id = ? AND f.gone = 1 GROUP BY f.id", (SID,))
    new = rows(conn, "SELECT gone FROM files WHERE path = ?", (str(session),))
    conn.close()
    assert [(k["gone"], k["n"]) for k in kept] == [(1, n_records)]
    assert new == [{"gone": 0}]
    # Refused while the new file is there, and nothing changed by the refusal.
    for ref in (SID, SID[:8]):
        assert f"{session} is another file, not the catalogued one" in _one_error(run("restore", ref))
        assert session.read_bytes() == b"{}\n"
    session.unlink()
    run("refresh", ok=True)
    r = run("restore", SID[:8], ok=True)
    assert "6 written" in r.output, r.output
    assert tree(projects / SUBAGENT_DEMO) == before
    assert subprocess.run(["cmp", str(session), str(DATA_CLI.parent / SUBAGENT_DEMO / f"{SID}.jsonl")]).returncode == 0


@pytest.mark.parametrize("refreshed", [False, True])
def test_another_file_at_a_gone_sessions_path_is_named_not_still_there(archive, tmp_path, refreshed):
    """Other bytes where a gone session was (a truncated copy, another
    session's file) are neither the catalogued file nor gone: restore by
    id, --json and --where name that file, overwrite nothing and exit
    non-zero; --to still writes the copy. Refresh indexes the stranger as
    a new file, the gone archive kept aside (listed gone, pruned alone)."""
    projects, before = archive
    session = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    whole = session.read_bytes()
    _sweep(projects)
    run("refresh", ok=True)
    stranger = whole[: len(whole) // 2]
    session.write_bytes(stranger)
    if refreshed:
        run("refresh", ok=True)
    for args in ([SID], [SID[:8], "--json"], ["--where", f"session_id = '{SID}'"], [str(session)]):
        err = _one_error(run("restore", *args))
        assert f"{session} is another file, not the catalogued one" in err, err
        assert "still there" not in err and "nothing was overwritten" in err
        assert session.read_bytes() == stranger
    dest = tmp_path / "elsewhere" / SUBAGENT_DEMO
    run("restore", SID, "--to", dest, ok=True)
    assert tree(dest) == before
    run("refresh", ok=True)
    gone = [g for g in json.loads(run("sessions", "--gone", "--json", ok=True).output) if g["session_id"] == SID]
    kept = [g["path"] for g in gone if g["file_bytes"] == len(whole)]
    assert len(kept) == 1 and kept[0].startswith(f"{session}.archived-"), gone  # the gone archive, set aside
    pruned = json.loads(run("prune", SID, "--json", ok=True).output)
    assert str(session) not in pruned["paths"] and any(".archived-" in p for p in pruned["paths"])
    assert session.read_bytes() == stranger
    conn = _conn(tmp_path)
    assert rows(conn, "SELECT gone, size FROM files WHERE path = ?", (str(session),)) == \
        [{"gone": 0, "size": len(stranger)}]
    conn.close()


def test_a_restore_refusal_names_its_real_cause(archive, tmp_path):
    """A dangling link at the session's path, rows changed since refresh
    hashed the file (sha256 differs): each refusal says which, and nothing
    is written."""
    projects, _ = archive
    session = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    _sweep(projects)
    run("refresh", ok=True)
    # A link to nothing where the session was: in the way, and named so.
    session.symlink_to(tmp_path / "nowhere")
    run("refresh", ok=True)
    for ref in (SID, SID[:8]):
        err = _one_error(run("restore", ref))
        assert "a link is in the way" in err, err
    assert os.readlink(session) == str(tmp_path / "nowhere") and not (tmp_path / "nowhere").exists()
    session.unlink()
    conn = _conn(tmp_path)
    (file_id,) = conn.execute("SELECT id FROM files WHERE path = ?", (str(session),)).fetchone()
    for cid, first, lines, data in conn.execute(  # its stored lines changed in place
            "SELECT id, first_offset, lines, data FROM raw_chunks WHERE file_id = ?", (file_id,)).fetchall():
        changed = [(o, r.replace(b"subagent", b"SUBAGENT")) for o, r in chunks.decode(first, lines, data)]
        conn.execute("UPDATE raw_chunks SET data = ? WHERE id = ?", (chunks.encode(changed), cid))
    conn.commit()
    conn.close()
    err = _one_error(run("restore", SID))
    assert f"{SID}.jsonl (the sha256 of its rebuilt bytes differs" in err and "did not parse" not in err
    assert tree(projects / SUBAGENT_DEMO) == {}



@pytest.mark.parametrize("damage", ["not zlib", "truncated", "inflates past its size"])
def test_a_corrupt_stored_sidecar_is_one_error_line_naming_it(archive, tmp_path, damage):
    """A blob that is not zlib, is cut short, or inflates past the sidecar's
    catalogued size (a planted bomb: never inflated further) is named in one
    Error line; nothing is written."""
    import zlib

    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    conn = _conn(tmp_path)
    (sha256,) = conn.execute("SELECT sha256 FROM sidecars WHERE rel = 'persisted/thinking/u1.txt'").fetchone()
    (good,) = conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
    bad = {"not zlib": b"\x00not a zlib stream" * 10, "truncated": good[: len(good) // 2],
           "inflates past its size": zlib.compress(b"\0" * (64 << 20))}[damage]
    with conn:
        conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (bad, sha256))
    conn.close()
    err = _one_error(run("restore", SID))
    assert "u1.txt" in err and "corrupt" in err and "nothing was written" in err
    assert tree(projects / SUBAGENT_DEMO) == {}
    assert list((projects / SUBAGENT_DEMO).iterdir()) == []  # nor the folders it made: the project's stays


def _dirs(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir())


@pytest.mark.parametrize("where", ["in place", "--to"])
def test_a_failed_restore_removes_the_folders_it_made_and_only_those(archive, tmp_path, where):
    """A write that fails after its folders were made (a stored file whose
    bytes no longer hash to its sha256: found while it is written) takes
    back the files and the folders this restore made, deepest first, and
    leaves every folder that was there before, empty or not; one Error
    line, nothing half-written."""
    import zlib

    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    conn = _conn(tmp_path)
    (sha256, size) = conn.execute("SELECT sha256, size FROM sidecars WHERE rel = 'persisted/thinking/u1.txt'"
                                  ).fetchone()
    with conn:  # inflates to its catalogued size, but other bytes
        conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (zlib.compress(b"\0" * size), sha256))
    conn.close()
    if where == "in place":
        root = projects / SUBAGENT_DEMO
        (root / SID / "persisted").mkdir(parents=True)  # there before: stays, though empty
        args = [SID]
    else:
        root = tmp_path / "x"
        (root / "kept").mkdir(parents=True)
        args = [SID, "--to", root / "new" / "deep"]
    dirs = _dirs(root)
    err = _one_error(run("restore", *args))
    assert "u1.txt" in err and "nothing" in err, err
    assert tree(root) == {}
    assert _dirs(root) == dirs


# -- 4. what restore writes, records and prints, from a catalog read as input --

LIVE_LINE = b'{"type":"user","uuid":"live-append","message":{"role":"user","content":"appended by a live writer"}}\n'


def test_an_append_right_after_restore_is_read_by_the_next_refresh(archive, tmp_path):
    """The catalog records what restore wrote (its own file's figures before
    it had a name), not the file's stat after the fact: a line a live writer
    appends as soon as the file appears is seen as growth and read, and the
    archive then holds every byte of the file."""
    from txdb.surgery import restore as restoremod

    projects, _ = archive
    path = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    original = path.read_bytes()
    _sweep(projects)
    run("refresh", ok=True)
    conn = _conn(tmp_path)
    plans = [restoremod.plan_restore(conn, restoremod.choose(conn, SID), None, verify=False)]
    restoremod.restore(plans)
    with open(path, "ab") as fh:  # the writer: before restore has updated the catalog
        fh.write(LIVE_LINE)
    restoremod.register_restored(conn, plans)
    fid, size, cursor = conn.execute("SELECT id, size, cursor FROM files WHERE path = ?", (str(path),)).fetchone()
    assert size == cursor == len(original)
    conn.close()
    stats = json.loads(run("refresh", "--json", ok=True).output)
    assert (stats["grown"], stats["lines"]) == (1, 1), stats
    conn = _conn(tmp_path)
    assert conn.execute("SELECT size, cursor, sha256 FROM files WHERE id = ?", (fid,)).fetchone() == (
        len(original) + len(LIVE_LINE), len(original) + len(LIVE_LINE), sha(path))
    from txdb.surgery.restore import rebuild
    assert rebuild(conn, fid) == original + LIVE_LINE
    conn.close()
    _sweep(projects)
    run("refresh", ok=True)
    run("restore", SID, ok=True)
    assert path.read_bytes() == original + LIVE_LINE


def _move_catalogued(tmp_path, old: Path | str, new: Path | str) -> None:
    """A hand edits every catalogued path under ``old`` (files and sidecars) to lie under ``new``."""
    with _conn(tmp_path) as conn:
        for table in ("files", "sidecars"):
            conn.execute(f"UPDATE {table} SET path = ? || substr(path, ?) WHERE substr(path, 1, ?) = ?",
                         (str(new), len(str(old)) + 1, len(str(old)), str(old)))


def test_restore_in_place_writes_only_under_a_projects_root(archive, tmp_path):
    projects, before = archive
    _sweep(projects)
    run("refresh", ok=True)
    outside = tmp_path / "outside"
    _move_catalogued(tmp_path, projects / SUBAGENT_DEMO, outside / "evil")
    err = _one_error(run("restore", SID))
    assert "not under a projects folder" in err and "--root" in err and "--to" in err, err
    assert not outside.exists()
    assert "not under a projects folder" in _one_error(run("restore", SID, "--dry-run"))
    assert not outside.exists()
    assert "1 session, 6 files, 6 written" in run("restore", SID, "--root", outside, ok=True).output
    assert tree(outside / "evil") == before


@pytest.mark.parametrize("table,value", [("files", 1_000_000_000_000), ("files", "abc"), ("files", -1),
                                         ("sidecars", 1_000_000_000_000), ("sidecars", "abc"), ("sidecars", 2.5)])
def test_a_catalogued_size_that_is_not_the_archives_is_one_error_line(archive, tmp_path, table, value):
    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    with _conn(tmp_path) as conn:
        conn.execute(f"UPDATE {table} SET size = ? WHERE id = (SELECT min(id) FROM {table} WHERE path LIKE ?)",
                     (value, f"%/{SID}%"))
    for args in ([SID], [SID, "--dry-run"], [SID, "--to", tmp_path / "copy"]):
        err = _one_error(run("restore", *args))
        assert "size" in err and "was the catalog edited?" in err, err
    assert not (projects / SUBAGENT_DEMO / f"{SID}.jsonl").exists() and not (tmp_path / "copy").exists()


@pytest.mark.parametrize("name", [".bashrc", "notes.txt", f"{SID}.json"])
def test_a_session_file_catalogued_under_a_name_not_a_transcripts_is_refused(archive, tmp_path, monkeypatch, name):
    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    home = projects / "home"
    home.mkdir()
    (home / ".bashrc").write_text("export PS1='$ '\n")
    _move_catalogued(tmp_path, f"{projects / SUBAGENT_DEMO / SID}/", f"{home / SID}/")
    with _conn(tmp_path) as conn:
        conn.execute("UPDATE files SET path = ? WHERE path = ?",
                     (str(home / name), str(projects / SUBAGENT_DEMO / f"{SID}.jsonl")))
    for args in ([SID], [SID, "--dry-run"]):
        err = _one_error(run("restore", *args))
        assert "not a session transcript's name" in err, err
    assert (home / ".bashrc").read_text() == "export PS1='$ '\n"
    assert sorted(p.name for p in home.iterdir()) == [".bashrc"]


def test_a_catalogued_mode_never_gives_group_or_others_write_nor_setuid(archive, tmp_path):
    projects, before = archive
    _sweep(projects)
    run("refresh", ok=True)
    with _conn(tmp_path) as conn:
        conn.execute("UPDATE files SET mode = 3583")  # 0o6777
        conn.execute("UPDATE sidecars SET mode = 3583")
    run("restore", SID, ok=True)
    assert tree(projects / SUBAGENT_DEMO) == before
    files = [p for p in (projects / SUBAGENT_DEMO).rglob("*") if p.is_file()]
    assert len(files) == 6
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o755, p
    with _conn(tmp_path) as conn:  # the catalog says what is on disk
        assert {m for (m,) in conn.execute("SELECT mode FROM files WHERE path LIKE ?1 UNION SELECT mode FROM sidecars "
                                           "WHERE path LIKE ?1", (f"%{SID}%",))} == {0o755}


def test_restore_prints_each_path_on_its_own_line_control_characters_escaped(archive, tmp_path):
    projects, _ = archive
    odd = projects / SUBAGENT_DEMO / SID / "tool-results" / "a\nwrote evil\r\tb\x1b[2J.txt"
    odd.write_bytes(b"odd\n")
    backwards = projects / SUBAGENT_DEMO / SID / "tool-results" / "\u202etxt.exe"  # reads "exe.txt"
    backwards.write_bytes(b"rlo\n")
    run("refresh", ok=True)
    _sweep(projects)
    run("refresh", ok=True)
    out = run("restore", SID, ok=True).output
    lines = out.splitlines()
    assert len(lines) == 9, out  # 8 files, the summary
    assert all(re.match(r"wrote |1 session, ", line) for line in lines), out
    assert "a\\x0awrote evil\\x0d\\x09b\\x1b[2J.txt" in out, out
    assert "\\u202etxt.exe" in out and "\u202e" not in out, out
    assert odd.read_bytes() == b"odd\n"


def test_a_stranger_at_a_gone_sessions_path_does_not_take_its_gone_subagents(archive, tmp_path):
    """Another session's file put where a gone session was: the gone
    subagent transcripts in ``<id>/subagents/`` name the gone session (their
    lines), so `sessions --gone` lists them with it, not with the stranger."""
    projects, _ = archive
    _stranger(projects)
    listed = json.loads(run("sessions", "--gone", "--json", ok=True).output)
    assert [(r["session_id"], r["subagents_gone"]) for r in listed] == [(SID, 1)], listed
    from txdb.catalog import units
    with _conn(tmp_path) as conn:
        (fid,) = conn.execute("SELECT id FROM files WHERE kind = 'subagent' AND path LIKE ?", (f"%{SID}/subagents/%",)
                              ).fetchone()
        unit = units.unit_of(conn, fid)
        head = conn.execute("SELECT session_id, gone FROM files WHERE id = ?", (unit.files[0][0],)).fetchone()
    assert head == (SID, 1), head


@pytest.mark.parametrize("args", [[], ["--dry-run"], ["--where", f"session_id = '{SID}'"]])
def test_restore_in_place_never_writes_through_a_symlinked_folder_in_the_projects_folder(archive, tmp_path, args):
    """A catalogued path edited to ``<root>/evil/x/<id>.jsonl``, ``evil`` a
    link out of the projects folder: refused (a project folder is a direct
    child of the projects folder, no folder from there down a link), with
    nothing written or made out there."""
    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (projects / "evil").symlink_to(outside)
    _move_catalogued(tmp_path, projects / SUBAGENT_DEMO, projects / "evil" / "x")
    err = _one_error(run("restore", *(args or [SID]) if args[:1] == ["--where"] else [SID, *args]))
    assert "not a project folder" in err and "was the catalog edited?" in err, err
    assert list(outside.iterdir()) == []
    # one level deep, but that project folder itself the link: refused too
    _move_catalogued(tmp_path, projects / "evil" / "x", projects / "evil")
    err = _one_error(run("restore", *(args or [SID]) if args[:1] == ["--where"] else [SID, *args]))
    assert "symlink" in err, err
    assert list(outside.iterdir()) == []


def test_restore_in_place_refuses_a_symlinked_session_folder_and_names_outside_the_layout(archive, tmp_path):
    projects, before = archive
    _sweep(projects)
    run("refresh", ok=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    project = projects / SUBAGENT_DEMO
    was = sorted(p.name for p in project.iterdir())
    (project / SID).symlink_to(outside)  # the session's own folder a link out
    err = _one_error(run("restore", SID))
    assert f"{project / SID} is a symlink" in err, err
    assert list(outside.iterdir()) == [] and sorted(p.name for p in project.iterdir()) == sorted([*was, SID])
    (project / SID).unlink()
    # a subagent transcript catalogued beside the session under a name Claude Code never gives one
    with _conn(tmp_path) as conn:
        conn.execute("UPDATE files SET path = ? WHERE kind = 'subagent' AND path LIKE ?",
                     (str(project / "notes.jsonl"), f"%{SID}/subagents/%"))
    err = _one_error(run("restore", SID))
    assert "not where Claude Code keeps a session's files" in err, err
    assert sorted(p.name for p in project.iterdir()) == was


def test_restore_in_place_through_a_symlinked_projects_folder(archive, tmp_path):
    """The projects folder itself may be a link (a symlinked ~/.claude)."""
    projects, before = archive
    _sweep(projects)
    run("refresh", ok=True)
    link = tmp_path / "link-to-projects"
    link.symlink_to(projects)
    run("restore", SID, "--root", link, ok=True)
    assert tree(projects / SUBAGENT_DEMO) == before
    _sweep(projects)
    run("refresh", ok=True)
    (tmp_path / "config").symlink_to(tmp_path)  # the default root, under a linked config folder
    os.environ["CLAUDE_CONFIG_DIR"] = str(tmp_path / "config")  # the fixture's monkeypatch restores it
    run("restore", SID, ok=True)
    assert tree(projects / SUBAGENT_DEMO) == before


def test_a_forged_line_count_does_not_raise_the_size_restore_reads(archive, tmp_path):
    """``files.lines`` is no bound: a size raised with it (1.5 GB of line
    endings past the records) is one error line, read with memory bounded
    (a MemoryError traceback under a 1.2 GB address-space limit before)."""
    import resource
    import sys

    projects, _ = archive
    _sweep(projects)
    run("refresh", ok=True)
    with _conn(tmp_path) as conn:
        conn.execute("UPDATE files SET lines = 1000000000, size = 1500000000 WHERE path = ?",
                     (str(projects / SUBAGENT_DEMO / f"{SID}.jsonl"),))

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1_200_000 * 1024, 1_200_000 * 1024))

    for args in ([SID], [SID, "--dry-run"]):
        r = subprocess.run([sys.executable, "-m", "txdb", "restore", *args], capture_output=True, text=True,
                           preexec_fn=limit, env=os.environ.copy(), timeout=120)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        lines = (r.stdout + r.stderr).strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and "size" in lines[0], lines
    assert not (projects / SUBAGENT_DEMO / f"{SID}.jsonl").exists()


def test_the_line_ending_guess_reads_no_further_than_the_cursor(archive, tmp_path):
    """likely_newline rebuilds the last bytes before the read cursor only:
    a catalogued size far past it is never built in memory."""
    import tracemalloc

    from txdb.surgery import restore as restoremod

    projects, _ = archive
    path = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    with _conn(tmp_path) as conn:
        fid, size = conn.execute("SELECT id, size FROM files WHERE path = ?", (str(path),)).fetchone()
        assert restoremod.likely_newline(conn, fid) == b"\n"
        conn.execute("UPDATE files SET size = ? WHERE id = ?", (size + 300_000_000, fid))
        tracemalloc.start()
        try:
            restoremod.likely_newline(conn, fid)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 16_000_000, peak


def _stranger(projects: Path) -> tuple[Path, Path]:
    """The demo session swept, then another session's file put at its path
    (its lines name that session): (the path, the other session's file)."""
    _sweep(projects)
    run("refresh", ok=True)
    other = next(p for p in projects.rglob("*.jsonl") if p.parent.parent == projects and p.stem != SID)
    session = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    shutil.copyfile(other, session)
    run("refresh", ok=True)
    return session, other


def test_a_live_stranger_is_not_gone_and_its_id_reaches_no_other_sessions_archive(archive, tmp_path):
    """The stranger stands at the gone session's path, live: pruning or
    restoring it by its own id finds nothing gone (the gone session's
    archive is not its), and the gone session still comes back whole."""
    projects, before = archive
    session, other = _stranger(projects)
    new = "aaaaaaaa-1111-4222-8333-444444444444"  # a session of its own, found only at that path
    session.write_bytes(other.read_bytes().replace(other.stem.encode(), new.encode()))
    run("refresh", ok=True)
    r = run("prune", new)
    assert r.exit_code == 1 and "is not gone" in r.output, r.output
    out = run("restore", new, "--to", tmp_path / "out", "--dry-run", ok=True).output
    assert f"({session.stat().st_size:,} bytes, session)" in out and "1 session, 1 file:" in out, out
    session.unlink()
    run("refresh", ok=True)
    run("prune", new, ok=True)  # gone now: its own archive only
    run("restore", SID, ok=True)
    assert tree(projects / SUBAGENT_DEMO) == before


def test_a_stranger_gone_in_its_turn_is_its_own_session_to_restore_and_prune(archive, tmp_path):
    """The stranger at a gone session's path goes in its turn. The session's
    id gives back that session (its own bytes, its subagent transcript, its
    folder's files), not the stranger; the path, which held both, is refused
    naming both; the stranger's own session, live elsewhere, is still there."""
    projects, before = archive
    session, other = _stranger(projects)
    session.unlink()
    run("refresh", ok=True)

    for cmd in (("restore", session, "--dry-run"), ("prune", session, "--dry-run")):
        r = run(*cmd)
        assert r.exit_code == 1 and f"held the files of 2 sessions ({SID}, {other.stem})" in r.output \
            or f"({other.stem}, {SID})" in r.output, r.output
    # the other session is live at its own path: its copy at this session's path is not where its id
    # gives it back (that would stand in this session's way), nor what pruning it deletes
    r = run("restore", other.stem)
    assert r.exit_code == 1 and "still there" in r.output and not session.exists(), r.output
    r = run("prune", other.stem, "--dry-run")
    assert r.exit_code == 1 and "is not gone" in r.output and "taken as" not in r.output, r.output
    assert str(session) not in r.output, r.output  # no `txdb prune PATH` pointing at the other session's path
    dry = json.loads(run("prune", SID, "--dry-run", "--json", ok=True).output)
    assert str(session) not in dry["paths"] and len(dry["paths"]) == 2, dry  # the session and its subagent
    assert str(session) in json.loads(run("prune", "--all-gone", "--dry-run", "--json", ok=True).output)["paths"]

    run("restore", SID, ok=True)
    assert tree(projects / SUBAGENT_DEMO) == before


def test_restore_and_prune_of_a_path_the_catalog_lacks_add_nothing_to_it(archive, tmp_path):
    """A session file outside the projects folders, named to restore or
    prune (a dry run, a refusal): the catalog gains no row, so sessions and
    cost read as before."""
    projects, _ = archive
    outside = tmp_path / "elsewhere" / f"{SID}.jsonl"
    outside.parent.mkdir()
    shutil.copyfile(projects / SUBAGENT_DEMO / f"{SID}.jsonl", outside)
    with _conn(tmp_path) as conn:
        before = conn.execute("SELECT count(*) FROM files").fetchone()
    for cmd in (("prune", outside, "--dry-run"), ("restore", outside, "--dry-run"), ("prune", outside)):
        r = run(*cmd)
        assert r.exit_code == 1 and "is not in the catalog" in r.output, r.output
    with _conn(tmp_path) as conn:
        assert conn.execute("SELECT count(*) FROM files").fetchone() == before


def test_every_file_of_a_session_folder_comes_back(archive, tmp_path):
    """Claude Code's cleanup deletes a session's whole folder: its own files
    beside subagents/ (resume-head.jsonl, workflows/, remote-agents/) are
    archived with the session, held whole by doctor's count, and given back."""
    projects, _ = archive
    sdir = projects / SUBAGENT_DEMO / SID
    sessions = len(json.loads(run("sessions", "--json", "--subagents", ok=True).output))
    for rel, body in {"resume-head.jsonl": b'{"type":"x"}\n', "workflows/w1.json": b'{"steps":[1]}',
                      "remote-agents/agent-r1.jsonl": b'{"type":"user"}\n', "notes.md": b"# notes\n"}.items():
        (sdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (sdir / rel).write_bytes(body)
    run("refresh", ok=True)
    before = tree(projects / SUBAGENT_DEMO)
    assert len(json.loads(run("sessions", "--json", "--subagents", ok=True).output)) == sessions  # no transcript
    _sweep(projects)
    run("refresh", ok=True)
    run("restore", SID, ok=True)
    assert tree(projects / SUBAGENT_DEMO) == before


def test_restore_where_over_two_sessions_gone_from_one_path_gives_back_one_and_names_the_other(archive, tmp_path):
    """Two sessions' files went from one path: `restore --where` over both
    writes one there and says the other goes back with --to, exit 1; the
    dry run says the same."""
    projects, _ = archive
    session, other = _stranger(projects)
    session.unlink()
    run("refresh", ok=True)
    where = f"session_id in ('{SID}', '{other.stem}') and file_id in (select file_id from gone_sessions)"
    for dry in (("--dry-run",), ()):
        r = run("restore", "--where", where, *dry)
        assert r.exit_code == 1, r.output
        assert r.output.count(f"{session} (") == 1, r.output
        assert "is where this restore gives back session" in r.output and "--to DIR" in r.output, r.output
    assert session.exists()


def test_a_live_sessions_changed_file_is_left_alone_while_its_missing_ones_come_back(archive, tmp_path):
    """Beside a live session, restore writes only what is missing: a file of
    its folder changed since refresh saw it is the live one, left as it is,
    not another file in the way."""
    projects, _ = archive
    sdir = projects / SUBAGENT_DEMO / SID
    (sdir / "resume-head.jsonl").write_bytes(b'{"a":1}\n')
    run("refresh", ok=True)
    gone = sdir / "persisted" / "thinking" / "u1.txt"
    kept = gone.read_bytes()
    with open(sdir / "resume-head.jsonl", "ab") as fh:
        fh.write(b'{"a":2}\n')
    gone.unlink()
    out = run("restore", SID, ok=True).output
    assert gone.read_bytes() == kept
    assert (sdir / "resume-head.jsonl").read_bytes() == b'{"a":1}\n{"a":2}\n'
    assert f"wrote {gone} (" in out and f"already there {sdir / 'resume-head.jsonl'} (" in out, out
