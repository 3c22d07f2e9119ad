"""restore, whole (issue 28): in place after a --to copy, --where over gone
sessions, the original path after the copy is deleted, a lone deleted
subagent transcript, nothing re-read by the next refresh, mode and mtime
kept, bounded memory (issue 25 item 9); and a prune that cannot surprise."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run
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


def test_where_over_gone_sessions_restores_those_it_can_and_names_the_others(archive, tmp_path):
    projects, before = archive
    tools = projects / TOOLS / f"{TOOLS_SID}.jsonl"
    tools_bytes = tools.read_bytes()
    _sweep(projects)
    tools.unlink()
    run("refresh", ok=True)
    with _conn(tmp_path) as conn:  # one of the two cannot be given back whole
        conn.execute("UPDATE files SET sha256 = NULL WHERE path = ?", (str(tools),))
    r = run("restore", "--where", f"session_id IN ('{SID}', '{TOOLS_SID}')", ok=True)
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
    run("refresh", ok=True)
    listed = json.loads(run("sessions", "--gone", "--json", ok=True).output)
    assert [(r["session_id"], r["subagents_gone"]) for r in listed] == [(SID, 1)]
    assert listed[0]["gone_at"]
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
    assert "is not a session transcript" in err
    bak.unlink()
    assert tree(projects / SUBAGENT_DEMO) == before
