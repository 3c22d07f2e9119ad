"""A FIFO (or any file that is not a regular file) at a name txdb opens is
named and passed over at once, never opened and waited on: in the projects
folder under `refresh` and `refresh --watch`, and at a sidecar's name under
a persist pass (which holds the session lock)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sessions import append, conversation, user, write
from test_bad_input import deep_session
from test_watch import interrupt, lines_of, poll, start, wait_ready
from txdb.catalog import db
from txdb.catalog.ingest.store import refresh

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")

SID = "11111111-2222-3333-4444-555555555555"


def unblock(fifo: Path) -> None:
    """Open the FIFO's other end once, so that a reader stuck in open() (the
    bug) gets EOF and the test ends instead of hanging."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # no reader waiting


def test_refresh_names_a_fifo_named_like_a_session_and_reads_the_rest(tmp_path):
    root = tmp_path / "projects"
    good = write(root / "-p" / "a.jsonl", conversation(1, session="a"))
    fifo = root / "-p" / f"{SID}.jsonl"
    os.mkfifo(fifo)
    conn = db.connect(tmp_path / "c.db")
    try:
        stats = refresh(conn, [root])
        assert stats.new == 1 and conn.execute("SELECT count(*) FROM records").fetchone()[0] == 4
        assert stats.unreadable == [{"path": str(fifo), "error": "a FIFO, not a regular file"}]
        assert "a FIFO, not a regular file" in stats.summary()
    finally:
        conn.close()
    assert fifo.exists() and good.exists()


def test_refresh_watch_passes_over_a_new_fifo_and_keeps_watching(tmp_path):
    root = tmp_path / "projects"
    first = write(root / "-p" / "a.jsonl", conversation(1, session="a"))
    db_path = tmp_path / "c.db"
    fifo = root / "-p" / f"{SID}.jsonl"
    proc = start(["refresh", "--watch", "--root", str(root), "--db", str(db_path)], tmp_path)
    try:
        wait_ready(proc)
        os.mkfifo(fifo)
        later = write(root / "-p" / "b.jsonl", conversation(1, session="b"))
        append(first, user("after the fifo", session="a"))
        assert poll(lambda: lines_of(db_path, later) == 4), "the watcher stopped at the FIFO"
        assert poll(lambda: lines_of(db_path, first) == 5)
    finally:
        unblock(fifo)
        rc, err = interrupt(proc)
    assert rc in (0, 130), err
    assert "Traceback" not in err
    assert f"{fifo}" in err and "a FIFO, not a regular file" in err  # named, not silently dropped


def test_a_fifo_at_a_sidecar_name_refuses_the_pass_at_once_and_frees_the_lock(tmp_path):
    session = tmp_path / "projects" / "-p" / f"{SID}.jsonl"
    session.parent.mkdir(parents=True)
    session.write_bytes(deep_session(1, "tool_use")[0])  # holds a 20 kB result of toolu_big
    fifo = session.parent / SID / "tool-results" / "toolu_big.txt"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    before = {p: p.read_bytes() for p in session.parent.rglob("*") if p.is_file()}
    env = {**os.environ, "TXDB_DB": str(tmp_path / "c.db")}
    cmd = [sys.executable, "-m", "txdb.cli", "persist-tools", str(session), "--min-chars", "1"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("persist-tools waited on the FIFO")
    finally:
        unblock(fifo)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"Error: cannot read the existing sidecar {fifo}: a FIFO, not a regular file"]
    assert {p: p.read_bytes() for p in session.parent.rglob("*") if p.is_file()} == before
    # The lock was let go: with the FIFO gone the same pass runs.
    fifo.unlink()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert fifo.is_file()


# -- what a killed persist pass leaves in the sidecar folder ---------------------

KILLED_AT_LINK = (
    "import os, signal, sys\n"
    "os.link = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # killed between temp file and link\n"
    "from txdb.cli import main\n"
    "sys.argv[0] = 'txdb'\n"
    "main()\n"
)


def test_temporaries_of_a_killed_persist_pass_are_cleaned_by_the_next(tmp_path):
    session = tmp_path / "projects" / "-p" / f"{SID}.jsonl"
    session.parent.mkdir(parents=True)
    session.write_bytes(deep_session(1, "tool_use")[0])
    folder = session.parent / SID / "tool-results"
    env = {**os.environ, "TXDB_DB": str(tmp_path / "c.db")}
    args = ["persist-tools", str(session), "--min-chars", "1"]
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_LINK, *args], capture_output=True, env=env,
                            timeout=60)
    assert killed.returncode == -9
    left = [p.name for p in folder.iterdir() if p.name.endswith(".txdb-tmp")]
    # Sidecars are written nameless (O_TMPFILE) where the filesystem can: a
    # kill then leaves nothing at all; elsewhere named temporaries are left.
    from txdb.model.durability import nameless_file_at  # noqa: F401  (the writer this test kills)

    assert all(n.endswith(".txdb-tmp") for n in left) and "toolu_big.txt" not in os.listdir(folder)
    r = subprocess.run([sys.executable, "-m", "txdb.cli", *args], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["toolu_big.txt"]
