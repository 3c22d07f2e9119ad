"""restore, whole (issue 28): in place after a --to copy, --where over gone
sessions, the original path after the copy is deleted, a lone deleted
subagent transcript, nothing re-read by the next refresh, mode and mtime
kept, bounded memory (issue 25 item 9); and a prune that cannot surprise."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import copy_fixture_sessions, run
import test_restore
from test_restore import SID, SUBAGENT_DEMO, _conn, _one_error, _sweep, tree

archive = test_restore.archive  # the same fixture

TOOLS = "-tmp-txdb-cli-fixtures-tools-demo"
TOOLS_SID = "0ff9cf6e-e3b0-420c-913e-806c2aa938aa"
AGENT = f"{SID}/subagents/agent-af2f709f0345e1da9.jsonl"


def _refresh_json() -> dict:
    return json.loads(run("refresh", "--json", ok=True).output)


def _gone(projects: Path) -> None:
    _sweep(projects)
    run("refresh", ok=True)


def test_in_place_after_a_copy_elsewhere(archive, tmp_path):
    projects, before = archive
    _gone(projects)
    dest = tmp_path / "elsewhere" / SUBAGENT_DEMO
    run("restore", SID, "--to", dest, ok=True)
    assert tree(dest) == before
    assert "matches" not in run("restore", SID, "--dry-run", ok=True).output
    r = run("restore", SID, ok=True)
    assert "6 written" in r.output
    assert tree(projects / SUBAGENT_DEMO) == before
    with _conn(tmp_path) as conn:  # the copy outside the projects root is no file row of the session
        assert conn.execute("SELECT count(*) FROM files WHERE path LIKE ?", (f"{tmp_path / 'elsewhere'}%",)
                            ).fetchone()[0] == 0


def test_once_the_copy_is_deleted_restore_writes_the_original_path(archive, tmp_path):
    projects, before = archive
    _gone(projects)
    dest = projects / "-home-me-copy"  # inside the projects root: the next refresh catalogues it
    run("restore", SID, "--to", dest, ok=True)
    run("refresh", ok=True)
    with _conn(tmp_path) as conn:
        assert conn.execute("SELECT count(*) FROM files WHERE kind = 'session' AND session_id = ?",
                            (SID,)).fetchone()[0] == 2
    shutil.rmtree(dest)
    run("refresh", ok=True)
    r = run("restore", SID, ok=True)
    assert "1 session, 6 files, 6 written" in r.output, r.output
    assert tree(projects / SUBAGENT_DEMO) == before
    assert not dest.exists()
    # the original is live again: pruning by id names the gone copy, which its path prunes
    run("refresh", ok=True)
    copy = dest / f"{SID}.jsonl"
    assert _one_error(run("prune", SID, "--dry-run")) == (
        f"Error: {SID} is not gone: prune deletes only the archive of files that vanished from disk "
        f"(a copy of it gone from {copy}: `txdb prune {copy}`)")
    assert "would delete the archive of 1 session" in run("prune", copy, "--dry-run", ok=True).output


def test_where_over_gone_sessions_restores_those_it_can_and_names_the_others(archive, tmp_path):
    projects, before = archive
    tools = projects / TOOLS / f"{TOOLS_SID}.jsonl"
    tools_bytes = tools.read_bytes()
    _sweep(projects)
    tools.unlink()
    run("refresh", ok=True)
    with _conn(tmp_path) as conn:  # one of the two cannot be given back whole
        conn.execute("UPDATE files SET sha256 = NULL WHERE path = ?", (str(tools),))
    dry = run("restore", SID, "--dry-run", ok=True).output
    assert dry.endswith("1 session, 6 files: dry run, nothing written\n"), dry
    r = run("restore", "--where", f"session_id IN ('{SID}', '{TOOLS_SID}')")
    assert r.exit_code == 1  # a script must not take it for a whole restore
    assert "1 session, 6 files, 6 written; 1 not restored" in r.output, r.output
    assert f"not restored: cannot give back whole: {tools}" in r.output
    assert tree(projects / SUBAGENT_DEMO) == before and not tools.exists()
    # none restorable: one Error line
    err = _one_error(run("restore", "--where", f"session_id = '{TOOLS_SID}'"))
    assert "none of the 1 sessions" in err and str(tools) in err
    with _conn(tmp_path) as conn:
        conn.execute("UPDATE files SET sha256 = ? WHERE path = ?",
                     (__import__("hashlib").sha256(tools_bytes).hexdigest(), str(tools)))
    run("restore", "--where", "1 = 1", ok=True)  # the live (restored) session is named, the gone one written
    assert tools.read_bytes() == tools_bytes


def test_a_lone_deleted_subagent_is_listed_and_restored_in_place(archive, tmp_path):
    projects, before = archive
    agent = projects / SUBAGENT_DEMO / AGENT
    agent.unlink()
    assert "(1 subagent transcript newly gone: txdb sessions --gone)" in run("refresh", ok=True).output
    listed = json.loads(run("sessions", "--gone", "--json", ok=True).output)
    assert [(r["session_id"], r["subagents_gone"]) for r in listed] == [(SID, 1)]
    assert listed[0]["gone_at"]
    dry = run("restore", SID, "--dry-run", ok=True).output  # what it writes: the one file missing
    n = len(dry.splitlines()) - 1
    assert dry.endswith(f"1 session, {n} files ({n - 1} already there): dry run, nothing written\n"), dry
    r = run("restore", SID, ok=True)
    assert "1 written" in r.output and f"wrote {agent}" in r.output, r.output
    assert tree(projects / SUBAGENT_DEMO) == before
    assert run("sessions", "--gone", "--json", ok=True).output.strip() == "[]"
    # the subagent's own name gives its session too; nothing missing now
    assert "still there" in _one_error(run("restore", "agent-af2f709f0345e1da9"))


def test_the_next_refresh_reads_nothing_of_a_restored_session(archive, tmp_path):
    projects, before = archive
    _gone(projects)
    run("restore", SID, ok=True)
    stats = _refresh_json()
    assert (stats["new"], stats["grown"], stats["rewritten"], stats["lines"], stats["bytes"],
            stats["sidecars"]) == (0, 0, 0, 0, 0, 0), stats
    assert stats["gone"] == 0


def test_restored_files_keep_their_mode_and_mtime(archive, tmp_path):
    projects, before = archive
    folder = projects / SUBAGENT_DEMO
    want = {
        f"{SID}.jsonl": (0o640, 1_700_000_000_123_456_789),
        AGENT: (0o600, 1_700_000_100_000_000_000),
        f"{SID}/tool-results/toolu_01.txt": (0o644, 1_700_000_200_000_000_000),
    }
    for rel, (mode, mtime) in want.items():
        os.chmod(folder / rel, mode)
        os.utime(folder / rel, ns=(mtime, mtime))
    run("refresh", ok=True)
    _gone(projects)
    run("restore", SID, ok=True)
    for rel, (mode, mtime) in want.items():
        st = (folder / rel).stat()
        assert (stat.S_IMODE(st.st_mode), st.st_mtime_ns) == (mode, mtime), rel
    assert tree(folder) == before
    assert _refresh_json()["bytes"] == 0


def _peak_rss_kb(args: list[str], env: dict) -> int:
    """Peak RSS (KiB) of ``txdb ARGS`` run in a child of a fresh interpreter."""
    code = textwrap.dedent(f"""
        import resource, subprocess, sys
        r = subprocess.run([sys.executable, "-m", "txdb.cli", *{args!r}], capture_output=True, text=True)
        print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        sys.stderr.write(r.stdout + r.stderr)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    rc, peak = out.stdout.split()
    assert rc == "0", out.stderr
    return int(peak)


def test_a_huge_sidecar_is_restored_in_bounded_memory(archive, tmp_path):
    """A 256 MiB sparse sidecar stores in a few hundred kB; restore inflates
    and writes it in pieces (it took the whole file in RAM, twice)."""
    projects, before = archive
    big = projects / SUBAGENT_DEMO / SID / "tool-results" / "toolu_huge.txt"
    with open(big, "wb") as fh:
        fh.truncate(256 << 20)
    run("refresh", ok=True)
    _gone(projects)
    peak = _peak_rss_kb(["restore", SID], dict(os.environ))
    assert big.stat().st_size == 256 << 20
    with open(big, "rb") as fh:
        assert all(not any(chunk) for chunk in iter(lambda: fh.read(1 << 22), b""))
    assert peak < 128 * 1024, f"peak RSS {peak / 1024:.0f} MiB"


def test_restore_of_a_pruned_session_says_it_was_pruned(archive, tmp_path):
    projects, _ = archive
    _gone(projects)
    run("prune", SID, ok=True)
    for ref in (SID, SID[:8]):
        err = _one_error(run("restore", ref))
        assert "was pruned from the catalog" in err and "refresh" not in err, err


# -- prune that cannot surprise -------------------------------------------------

def _counts(tmp_path) -> tuple[int, int]:
    with _conn(tmp_path) as conn:
        return (conn.execute("SELECT count(*) FROM files").fetchone()[0],
                conn.execute("SELECT count(*) FROM sidecars").fetchone()[0])


def test_prune_dry_run_counts_and_deletes_nothing(archive, tmp_path):
    projects, _ = archive
    _gone(projects)
    before = _counts(tmp_path)
    with _conn(tmp_path) as conn:
        lines, size = conn.execute("SELECT sum(lines), sum(size) FROM files WHERE gone = 1").fetchone()
        side = conn.execute("SELECT sum(size) FROM sidecars WHERE gone = 1").fetchone()[0]
    out = json.loads(run("prune", "--all-gone", "--dry-run", "--json", ok=True).output)
    assert out["dry_run"] and out["sessions"] == 1
    assert (out["files"], out["lines"], out["bytes"]) == (2 + 4, lines, size + side)
    assert _counts(tmp_path) == before
    text = run("prune", "--all-gone", ok=True).output  # without --yes: a dry run that says how to go on
    assert "would delete" in text and "--yes" in text and _counts(tmp_path) == before
    assert run("restore", SID, "--dry-run", ok=True)


def test_prune_deletes_only_what_is_asked_by_name(archive, tmp_path):
    projects, before = archive
    tools = projects / TOOLS / f"{TOOLS_SID}.jsonl"
    _sweep(projects)
    tools.unlink()
    run("refresh", ok=True)
    out = run("prune", TOOLS_SID, ok=True).output
    assert "deleted the archive of 1 session" in out, out
    with _conn(tmp_path) as conn:
        assert conn.execute("SELECT count(*) FROM files WHERE path = ?", (str(tools),)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM pruned_sessions WHERE session_id = ?",
                            (TOOLS_SID,)).fetchone()[0] == 1
    run("restore", SID, ok=True)  # the other gone session was kept
    assert tree(projects / SUBAGENT_DEMO) == before
    # a live session is never pruned
    assert "not gone" in _one_error(run("prune", SID))
    assert "Usage" in run("prune").output


def test_refresh_prune_is_an_error_pointing_to_prune(archive, tmp_path):
    projects, _ = archive
    _gone(projects)
    before = _counts(tmp_path)
    err = _one_error(run("refresh", "--prune"))
    assert "txdb prune" in err and "--dry-run" in err
    assert _counts(tmp_path) == before
    run("prune", "--all-gone", "--yes", ok=True)
    with _conn(tmp_path) as conn:
        assert conn.execute("SELECT count(*) FROM files WHERE gone = 1").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM sidecars WHERE gone = 1").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM sidecars)"
                            ).fetchone()[0] == 0


@pytest.mark.parametrize("where", ["files", "sidecars"])
def test_prune_leaves_live_rows_alone(archive, tmp_path, where):
    projects, _ = archive
    (projects / SUBAGENT_DEMO / AGENT).unlink()
    run("refresh", ok=True)
    run("prune", "--all-gone", "--yes", ok=True)
    with _conn(tmp_path) as conn:
        live = conn.execute(f"SELECT count(*) FROM {where} WHERE gone = 0").fetchone()[0]
        assert live > 0 and conn.execute(f"SELECT count(*) FROM {where} WHERE gone = 1").fetchone()[0] == 0


def test_restore_of_a_backup_path_says_it_is_not_a_session(archive, tmp_path):
    """A `.bak` named by path is neither a session nor a subagent: one Error
    saying so (it read "a subagent transcript whose session ..."), nothing written."""
    projects, before = archive
    session = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    bak = session.with_name(session.name + ".bak")
    shutil.copyfile(session, bak)
    err = _one_error(run("restore", str(bak)))
    assert "is not a session transcript (a backup)" in err, err
    bak.unlink()
    assert tree(projects / SUBAGENT_DEMO) == before


# -- lone subagent transcripts: their session file never catalogued --------

DAIN = "-Users-dain-workspace-coderabbit-review-helper"
DAIN_AGENT = "agent-1d78a5e5"  # an older release's agent file beside the sessions
DAIN_PARENT = "8a69e93c-e842-471d-a053-5c316757e5e9"  # the session its lines name: not in the folder


def _lone_archive(tmp_path, monkeypatch) -> tuple[Path, dict[str, str]]:
    """The subagent demo with its session file deleted before txdb ever saw
    it (its subagent transcript and its .meta.json are what is left)."""
    projects = copy_fixture_sessions(tmp_path / "projects")
    (projects / SUBAGENT_DEMO / f"{SID}.jsonl").unlink()
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    run("refresh", "--root", projects, ok=True)
    return projects, tree(projects / SUBAGENT_DEMO)


def test_a_lone_subagent_whose_session_was_never_catalogued_is_listed_and_restored(tmp_path, monkeypatch):
    projects, before = _lone_archive(tmp_path, monkeypatch)
    shutil.rmtree(projects / SUBAGENT_DEMO / SID)  # the sweep takes the folder too
    run("refresh", ok=True)
    listed = json.loads(run("sessions", "--gone", "--json", ok=True).output)
    mine = [r for r in listed if r["session_id"] == SID]
    assert len(mine) == 1, listed
    assert (mine[0]["what"], mine[0]["subagents_gone"], mine[0]["file_bytes"], mine[0]["path"]) == (
        "lone subagent transcripts", 1, None, str(projects / SUBAGENT_DEMO / AGENT))
    assert mine[0]["gone_at"] and mine[0]["gone_lines"] and mine[0]["lines"] is None
    r = run("restore", SID, ok=True)
    assert "1 session, 2 files, 2 written" in r.output, r.output
    assert tree(projects / SUBAGENT_DEMO) == before
    assert not (projects / SUBAGENT_DEMO / f"{SID}.jsonl").exists()  # nothing the catalog never held
    assert _refresh_json()["bytes"] == 0
    assert not [r for r in json.loads(run("sessions", "--gone", "--json", ok=True).output)
                if r["session_id"] == SID]
    # gone again: named by the transcript's own name, by its path, and chosen by --where
    shutil.rmtree(projects / SUBAGENT_DEMO / SID)
    run("refresh", ok=True)
    for ref in ("agent-af2f709f0345e1da9", str(projects / SUBAGENT_DEMO / AGENT)):
        assert "2 files: dry run" in run("restore", ref, "--dry-run", ok=True).output, ref
    r = run("restore", "--where", "session_id = 'agent-af2f709f0345e1da9'", ok=True)
    assert "2 written" in r.output, r.output
    assert tree(projects / SUBAGENT_DEMO) == before
    # by an id prefix; and a copy elsewhere in the projects, catalogued live, is not what the id means
    run("restore", SID, "--to", projects / "-home-me-copy", "--dry-run", ok=True)
    copy = projects / "-home-me-copy"
    shutil.copytree(projects / SUBAGENT_DEMO / SID, copy / SID)
    shutil.rmtree(projects / SUBAGENT_DEMO / SID)
    run("refresh", ok=True)
    assert "2 files: dry run" in run("restore", SID[:8], "--dry-run", ok=True).output
    r = run("restore", SID, ok=True)
    assert f"wrote {projects / SUBAGENT_DEMO / AGENT}" in r.output, r.output
    assert tree(projects / SUBAGENT_DEMO) == before


def test_a_lone_subagent_beside_the_sessions_is_restored_and_pruned_by_the_session_its_lines_name(
        tmp_path, monkeypatch):
    projects = copy_fixture_sessions(tmp_path / "projects")
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    run("refresh", "--root", projects, ok=True)
    agent = projects / DAIN / f"{DAIN_AGENT}.jsonl"
    want = agent.read_bytes()
    agent.unlink()
    run("refresh", ok=True)
    listed = {r["session_id"]: r for r in json.loads(run("sessions", "--gone", "--json", ok=True).output)}
    assert listed[DAIN_PARENT]["path"] == str(agent) and listed[DAIN_PARENT]["subagents_gone"] == 1
    assert f"would write {agent}" in run("restore", DAIN_AGENT, "--dry-run", ok=True).output
    r = run("restore", DAIN_PARENT, ok=True)
    assert "1 session, 1 file, 1 written" in r.output, r.output
    assert agent.read_bytes() == want
    agent.unlink()
    run("refresh", ok=True)
    dry = json.loads(run("prune", str(agent), "--dry-run", "--json", ok=True).output)
    assert (dry["sessions"], dry["paths"]) == (1, [str(agent)]), dry
    run("prune", DAIN_PARENT, ok=True)
    assert "pruned" in _one_error(run("restore", DAIN_AGENT))


def test_an_agent_file_beside_its_session_comes_back_with_it(tmp_path, monkeypatch):
    """An older release wrote a session's subagent transcripts beside it
    (agent-*.jsonl, their lines naming the session): restoring the session
    gives them back too, and prune deletes them with it."""
    projects = copy_fixture_sessions(tmp_path / "projects")
    folder = projects / DAIN
    session = folder / f"{DAIN_PARENT}.jsonl"
    (folder / "1ca217c4-f55d-4f6e-a994-b7e2231336f0.jsonl").rename(session)
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    run("refresh", "--root", projects, ok=True)
    before = tree(folder)
    for p in folder.iterdir():
        p.unlink()
    run("refresh", ok=True)
    listed = {r["session_id"]: r for r in json.loads(run("sessions", "--gone", "--json", ok=True).output)}
    assert listed[DAIN_PARENT]["subagents_gone"] == 1 and listed[DAIN_PARENT]["file_bytes"] is not None
    r = run("restore", DAIN_PARENT, ok=True)
    assert "1 session, 2 files, 2 written" in r.output, r.output
    assert tree(folder) == before
    for p in folder.iterdir():
        p.unlink()
    run("refresh", ok=True)
    dry = json.loads(run("prune", DAIN_PARENT, "--dry-run", "--json", ok=True).output)
    assert (dry["sessions"], sorted(dry["paths"])) == (1, sorted(str(folder / n) for n in before)), dry


def test_a_gone_session_is_named_by_its_path(archive, tmp_path):
    projects, before = archive
    _gone(projects)
    path = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    assert "6 files: dry run" in run("restore", path, "--dry-run", ok=True).output
    dry = json.loads(run("prune", path, "--dry-run", "--json", ok=True).output)
    assert dry["sessions"] == 1 and str(path) in dry["paths"]
    run("restore", path, ok=True)
    assert tree(projects / SUBAGENT_DEMO) == before


@pytest.mark.parametrize("forged", ["../../elsewhere/{name}", "{folder}/../../elsewhere/{name}", "rel/{name}"])
def test_a_catalogued_path_edited_to_climb_out_is_refused(archive, tmp_path, monkeypatch, forged):
    projects, before = archive
    _gone(projects)
    path = projects / SUBAGENT_DEMO / f"{SID}.jsonl"
    to = forged.format(name=path.name, folder=path.parent)
    with _conn(tmp_path) as conn:
        conn.execute("UPDATE files SET path = ? WHERE path = ?", (to, str(path)))
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    err = _one_error(run("restore", SID))
    assert "not an absolute, normalised path" in err, err
    assert not (tmp_path / "elsewhere").exists() and not (work / "rel").exists()
    assert not path.exists()


def test_restore_to_inside_a_sessions_folder_or_nowhere_is_refused(archive, tmp_path):
    projects, before = archive
    _gone(projects)
    inside = projects / "-experiments-worktrees" / "ef958aa1-0e93-49f0-bb71-150f63befcd1" / "subagents"
    assert "a session's own folder" in _one_error(run("restore", SID, "--to", inside))
    assert "--to needs a folder" in _one_error(run("restore", SID, "--to", ""))
    assert sorted(p.name for p in inside.iterdir()) == ["agent-a4ca7529859c158c2.jsonl",
                                                         "agent-a4ca7529859c158c2.meta.json"]


def test_what_is_in_the_way_is_named(archive, tmp_path):
    projects, before = archive
    _gone(projects)
    (projects / SUBAGENT_DEMO / f"{SID}.jsonl").mkdir()
    assert "a folder is in the way" in _one_error(run("restore", SID))
    (projects / SUBAGENT_DEMO / f"{SID}.jsonl").rmdir()
    dest = tmp_path / "copy"
    run("restore", SID, "--to", dest, ok=True)
    assert "a copy of the session is already there" in _one_error(run("restore", SID, "--to", dest))


def test_a_mode_or_mtime_edited_in_the_catalog_is_not_applied(archive, tmp_path):
    projects, before = archive
    _gone(projects)
    with _conn(tmp_path) as conn:
        conn.execute("UPDATE sidecars SET mtime_ns = 'abc', mode = 99999999")
        conn.execute("UPDATE files SET mtime_ns = -5, mode = 'x'")
    run("restore", SID, ok=True)
    assert tree(projects / SUBAGENT_DEMO) == before
    st = (projects / SUBAGENT_DEMO / f"{SID}.jsonl").stat()
    assert stat.S_IMODE(st.st_mode) == 0o600


def test_a_file_older_than_the_cleanup_period_is_restored_with_a_note_that_it_goes_again(archive, tmp_path):
    """Restore keeps a file's mtime; one older than cleanupPeriodDays is
    deleted again by Claude Code's next start: restore says so."""
    projects, before = archive
    folder = projects / SUBAGENT_DEMO
    old = int((__import__("time").time() - 40 * 86400) * 1e9)
    os.utime(folder / f"{SID}.jsonl", ns=(old, old))
    run("refresh", ok=True)
    _gone(projects)
    out = run("restore", SID, ok=True).output
    # its folder (subagent transcript, meta file) goes with the session file, whatever their own mtimes
    assert "Note: 6 of the files written go by an mtime more than 30 days old" in out, out
    assert "Claude Code's next start deletes them again" in out
    assert f"\n    {folder / f'{SID}.jsonl'}\n" in out  # each one named, not only counted
    assert (folder / f"{SID}.jsonl").stat().st_mtime_ns == old  # kept as catalogued
    listed = json.loads(run("restore", SID, "--to", tmp_path / "copy", "--json", ok=True).output)
    assert listed["deleted_again_at_next_start"] == []  # a copy elsewhere: not the session's place
    (tmp_path / "settings.json").write_text('{"cleanupPeriodDays": 60}')
    _gone(projects)
    out = run("restore", SID, ok=True).output
    assert "Note:" not in out, out
    assert tree(folder) == before


def test_an_old_subagent_transcript_restored_beside_its_fresh_session_file_is_not_due_again(archive, tmp_path):
    """Claude Code's cleanup deletes a session's folder with its session
    file: an old subagent transcript stays while the session file is fresh."""
    projects, before = archive
    folder = projects / SUBAGENT_DEMO
    agent = projects / SUBAGENT_DEMO / AGENT
    old = int((__import__("time").time() - 40 * 86400) * 1e9)
    os.utime(agent, ns=(old, old))
    run("refresh", ok=True)
    agent.unlink()  # the live session file stays, fresh
    run("refresh", ok=True)
    r = json.loads(run("restore", SID, "--json", ok=True).output)
    assert r["written"] == [str(agent)] and r["deleted_again_at_next_start"] == []
    assert agent.stat().st_mtime_ns == old
    agent.unlink()
    run("refresh", ok=True)
    out = run("restore", SID, ok=True).output
    assert "Note:" not in out and "wrote " + str(agent) in out, out
    assert tree(folder) == before


def test_a_desktop_apps_transcript_restored_is_not_said_to_go_again(tmp_path, monkeypatch):
    """The due-again note follows doctor's rules (doctor.sweep_kept): Claude
    Code keeps a desktop app's old transcript, so restoring one says nothing
    of deleting it; once its desktop-released file releases it, it does."""
    import time

    sid = "22222222-3333-4444-5555-666666666666"
    projects = tmp_path / "projects"
    session = projects / "-p" / f"{sid}.jsonl"
    session.parent.mkdir(parents=True)
    session.write_text(json.dumps({"type": "user", "sessionId": sid, "uuid": "u1", "entrypoint": "claude-desktop",
                                   "message": {"role": "user", "content": "hi"}}) + "\n")
    old = int((time.time() - 40 * 86400) * 1e9)
    os.utime(session, ns=(old, old))
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    run("refresh", ok=True)
    before = session.read_bytes()
    session.unlink()
    run("refresh", ok=True)
    r = json.loads(run("restore", sid, "--json", ok=True).output)
    assert r["written"] == [str(session)] and r["deleted_again_at_next_start"] == [], r
    assert session.read_bytes() == before
    session.with_name(f"{sid}.desktop-released.json").write_text('{"reason": "delete"}')
    session.unlink()
    run("refresh", ok=True)
    r = json.loads(run("restore", sid, "--json", ok=True).output)
    assert r["deleted_again_at_next_start"] == [str(session)], r


def _facts(p: Path) -> tuple[int, int]:
    """A transcript's lines and bytes, read from disk."""
    data = p.read_bytes()
    return data.count(b"\n"), len(data)


def _described(conn, path: Path) -> dict:
    """The catalog's project, title and timestamps of the transcript at ``path``."""
    row = conn.execute("SELECT s.project, s.title, s.first_timestamp, s.last_timestamp FROM sessions s "
                       "JOIN files f ON f.id = s.file_id WHERE f.path = ?", (str(path),)).fetchone()
    return dict(zip(("project", "title", "first_timestamp", "last_timestamp"), row))


def _gone_at(conn) -> str:
    return conn.execute("SELECT strftime('%Y-%m-%dT%H:%M:%SZ', max(gone_at)) FROM files WHERE gone = 1").fetchone()[0]


def _gone_rows(**where) -> list[dict]:
    rows = json.loads(run("sessions", "--gone", "--json", ok=True).output)
    return [r for r in rows if all(r[k] == v for k, v in where.items())]


def test_every_gone_row_says_what_is_gone_a_subagent_then_the_whole_session(archive, tmp_path):
    """A live session that lost only a subagent transcript is no gone session:
    its row counts the one transcript gone and names it; once the session file
    goes too, the row counts both and names the session file."""
    projects, before = archive
    session, agent = projects / SUBAGENT_DEMO / f"{SID}.jsonl", projects / SUBAGENT_DEMO / AGENT
    (s_lines, s_bytes), (a_lines, a_bytes) = _facts(session), _facts(agent)
    agent.unlink()
    run("refresh", ok=True)
    with _conn(tmp_path) as conn:
        about, gone_at = _described(conn, session), _gone_at(conn)
    assert _gone_rows() == [{
        "session_id": SID, "what": "subagent transcripts", **about, "gone_at": gone_at,
        "gone_files": 1, "gone_lines": a_lines, "gone_bytes": a_bytes, "path": str(agent),
        "lines": s_lines, "file_bytes": s_bytes, "subagents_gone": 1}]
    table = run("sessions", "--gone", "--table", ok=True).output.splitlines()
    assert table[0].split() == ["session_id", "what", "gone", "gone_at", "title", "project", "last_timestamp"]
    assert re.split(r"\s{2,}", table[2])[:3] == [SID, "subagent transcripts", f"1 file, {a_lines} lines, {a_bytes:,} bytes"]
    where = "session_id in (select session_id from gone_sessions)"
    assert "1 written" in run("restore", "--where", where, ok=True).output
    assert tree(projects / SUBAGENT_DEMO) == before and _gone_rows() == []
    run("refresh", ok=True)
    _sweep(projects)
    run("refresh", ok=True)
    with _conn(tmp_path) as conn:
        gone_at = _gone_at(conn)
    assert _gone_rows() == [{
        "session_id": SID, "what": "session", **about, "gone_at": gone_at,
        "gone_files": 2, "gone_lines": s_lines + a_lines, "gone_bytes": s_bytes + a_bytes, "path": str(session),
        "lines": s_lines, "file_bytes": s_bytes, "subagents_gone": 1}]
    assert "6 written" in run("restore", "--where", where, ok=True).output
    assert tree(projects / SUBAGENT_DEMO) == before


EVERY_GONE = ("session_id in (select session_id from gone_sessions) "
              "or parent_session_id in (select session_id from gone_sessions)")  # as docs/commands-guide.md


def test_a_lone_subagent_row_counts_only_its_gone_transcripts(tmp_path, monkeypatch):
    """Of the subagent transcripts of a session the catalog never held, the
    row counts and names only the gone one, not a live one beside it."""
    projects, _ = _lone_archive(tmp_path, monkeypatch)
    agent = projects / SUBAGENT_DEMO / AGENT
    live = agent.with_name("agent-a0000000000000000.jsonl")  # first by name: a path of the row before
    shutil.copyfile(agent, live)
    run("refresh", ok=True)
    a_lines, a_bytes = _facts(agent)
    before = tree(projects / SUBAGENT_DEMO)
    agent.unlink()
    run("refresh", ok=True)
    with _conn(tmp_path) as conn:
        about, gone_at = _described(conn, agent), _gone_at(conn)
    assert _gone_rows(session_id=SID) == [{
        "session_id": SID, "what": "lone subagent transcripts", **about, "gone_at": gone_at,
        "gone_files": 1, "gone_lines": a_lines, "gone_bytes": a_bytes, "path": str(agent),
        "lines": None, "file_bytes": None, "subagents_gone": 1}]
    # --where reads the sessions table, whose row of a lone transcript names its session as parent_session_id
    assert "matched no session" in _one_error(run("restore", "--where", EVERY_GONE.split(" or ")[0]))
    r = run("restore", "--where", EVERY_GONE, ok=True)
    assert f"wrote {agent}" in r.output, r.output
    assert tree(projects / SUBAGENT_DEMO) == before
