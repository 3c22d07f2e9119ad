"""One txdb command at a time on a session: a second one is refused at once,
with one Error line, and changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessions import conversation, write
from txdb.cli import cli

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


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


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
