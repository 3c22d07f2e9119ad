"""One txdb command at a time on a session: a second one is refused at once,
with one Error line, and changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run
from sessions import conversation, write

SID = "55555555-0000-0000-0000-000000000001"
HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def f(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    return write(tmp_path / "claude" / "projects" / "-home-me-app" / f"{SID}.jsonl", conversation(4, session=SID))


def _hold(path: Path) -> subprocess.Popen:
    """Another process in the middle of a txdb command on ``path``."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline() == b"locked\n"
    return p


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


def test_a_second_command_on_a_busy_session_is_refused(f):
    assert run("strip-thinking", f).exit_code == 0             # a pending copy from a first pass
    before = _files(f.parent)
    holder = _hold(f)
    try:
        for args in (("strip-all", f), ("compact-range", f, "--from", 4, "--to", 7), ("apply", f),
                     ("snapshot", f, "--refresh"), ("undo", f)):
            r = run(*args)
            assert r.exit_code == 1, (args, r.output)
            assert r.output == (f"Error: another txdb command is working on {f.name} right now (a surgery pass, "
                                f"apply or undo); run this one again when it has finished\n"), args
        assert _files(f.parent) == before                      # nothing changed
        assert run("verify", f).exit_code == 0                 # reading is never held up
    finally:
        holder.stdin.close()
        holder.wait()
    assert run("strip-all", f, "--apply").exit_code == 0


def test_a_lock_dies_with_its_process(f):
    holder = _hold(f)
    holder.kill()
    holder.wait()
    assert run("strip-all", f).exit_code == 0


def test_a_filesystem_without_locks_goes_on_unlocked(f, monkeypatch):
    """Some network mounts have no flock: surgery works there as it did before the lock."""
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert run("strip-all", f, "--apply").exit_code == 0


BUSY = ("another txdb command is working on {} right now (a surgery pass, apply or undo); "
        "run this one again when it has finished")


def test_the_lock_stays_on_the_session_after_apply_swaps_the_file(f, monkeypatch):
    """apply renames a new file onto the session and then still works (deletes
    the pending copy, refreshes, logs): a command started in that window is
    refused, not let in on the new, unlocked file to lose its copy."""
    from txdb.errors import SurgeryError
    from txdb.surgery import ops
    from txdb.surgery import pending as pend
    from txdb.surgery.engine import run_surgery

    assert run("strip-all", f).exit_code == 0
    applied = pend.pending_path(f).read_bytes()
    seen = []

    def meanwhile(step):
        if step != "swapped":
            return
        for cmd in (lambda: pend.snapshot(f, refresh=True),
                    lambda: run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))):
            try:
                cmd()
                seen.append("ran")
            except SurgeryError as e:
                seen.append(str(e))
    monkeypatch.setattr(pend, "_step_hook", meanwhile)
    r = run("apply", f)
    assert r.exit_code == 0, r.output
    assert seen == [BUSY.format(f.name)] * 2
    assert f.read_bytes() == applied
    assert not pend.pending_path(f).exists() and not pend.meta_path(f).exists()
    monkeypatch.setattr(pend, "_step_hook", None)
    assert pend.snapshot(f).created                           # released when apply ends


def test_the_lock_stays_on_the_session_after_undo_swaps_the_file(f, monkeypatch):
    """The same for undo, seen from another process while undo logs its row."""
    from txdb.surgery import log as logmod  # undo logs its row through log.log_entry

    assert run("strip-all", f, "--apply").exit_code == 0
    seen = []
    real = logmod.refresh_path

    def refresh_meanwhile(conn, path):  # runs after the swap, inside undo
        p = subprocess.run([sys.executable, "-m", "txdb.cli", "snapshot", str(f), "--refresh"],
                           capture_output=True, text=True)
        seen.append((p.returncode, (p.stdout + p.stderr).strip()))
        return real(conn, path)
    monkeypatch.setattr(logmod, "refresh_path", refresh_meanwhile)
    assert run("undo", f).exit_code == 0
    assert seen == [(1, "Error: " + BUSY.format(f.name))]
    assert not (f.parent / f"{f.name}.pending").exists()
