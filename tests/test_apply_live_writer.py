"""``apply`` catches a live writer that pauses between lines.

Lines appended to a session after its snapshot are discarded by apply (the
spec: for one's own session apply runs while the CLI is dead). A writer
still appending then chains its next lines on the discarded ones, and the
session no longer verifies. A CLI-style writer appending a line every
0.3-0.9 s passed the 400 ms settle check about half the time: now a file
that has grown past its snapshot and changed within ``LIVE_QUIET_SECONDS``
must stay quiet that long before apply reads it, so such a writer is always
seen; a quiet file (however old its unsnapshotted tail) keeps the 400 ms."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessions import DATA
from txdb.cli import cli
from txdb.surgery import pending as pend

SRC = DATA / "real" / "-src-experiments-claude_p"
SID = "29ccd257-68b1-427f-ae5f-6524b7cb6f20"
ROUNDS = 4  # each must refuse (a writer caught about half the time before passes all four about 1 in 16)

# Appends CLI-style records to argv[1] every 0.3-0.9 s, each a child of the
# last one it wrote (starting from the file's last line), until argv[2] exists.
WRITER = r'''
import os, random, sys, time, uuid, orjson
path, stop = sys.argv[1], sys.argv[2]
last = orjson.loads(open(path, "rb").read().rstrip(b"\n").rsplit(b"\n", 1)[-1])
parent, sid, n = last["uuid"], last.get("sessionId"), 0
rnd = random.Random(os.getpid())
while not os.path.exists(stop):
    n += 1
    kind = "user" if n % 2 else "assistant"
    msg = {"role": "user", "content": f"line {n}"} if kind == "user" else \
        {"role": "assistant", "model": "claude-opus-5", "id": f"msg_live_{n}",
         "content": [{"type": "text", "text": f"reply {n}"}], "usage": {"input_tokens": 1, "output_tokens": 1}}
    rec = {"parentUuid": parent, "isSidechain": False, "type": kind, "message": msg, "uuid": str(uuid.uuid4()),
           "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()), "sessionId": sid,
           "cwd": "/src/experiments/claude_p", "version": "2.1.328"}
    with open(path, "ab") as fh:  # opened by name for each line, as the CLI appends
        fh.write(orjson.dumps(rec) + b"\n")
    parent = rec["uuid"]
    print(n, flush=True)
    time.sleep(rnd.uniform(0.3, 0.9))
'''


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _session(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copytree(SRC, tmp_path / "projects" / SRC.name)
    f = tmp_path / "projects" / SRC.name / f"{SID}.jsonl"
    db = tmp_path / "c.db"
    assert run("refresh", "--root", tmp_path / "projects", "--db", db).exit_code == 0
    return f, db


class Writer:
    def __init__(self, f: Path, tmp_path: Path):
        self.stop = tmp_path / "stop-writer"
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, str(f), str(self.stop)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "1"  # it is writing

    def close(self):
        self.stop.touch()
        self.proc.wait(timeout=30)


def _grown_past_snapshot(f: Path, timeout: float = 30.0) -> None:
    size = pend.read_meta(f)["size"]
    end = time.monotonic() + timeout
    while f.stat().st_size <= size:
        assert time.monotonic() < end, "the writer stopped"
        time.sleep(0.02)


@pytest.mark.parametrize("how", ["apply", "apply --all-pending"])
def test_apply_refuses_while_a_writer_pauses_between_lines(tmp_path, how):
    f, db = _session(tmp_path)
    w = Writer(f, tmp_path)
    try:
        for i in range(ROUNDS):
            if not pend.pending_path(f).exists():
                assert run("persist-tools", f, "--min-chars", "100", "--db", db).exit_code == 0
            _grown_past_snapshot(f)  # lines the apply would discard, and the writer goes on
            args = ["apply", f] if how == "apply" else ["apply", "--all-pending"]
            r = run(*args, "--db", db)
            assert r.exit_code == 1 and "is being written right now" in r.stderr, \
                f"round {i}: applied with a live writer: {r.output}"
            assert not Path(f"{f}.bak").exists()
    finally:
        w.close()
    assert run("verify", f, "--db", db).exit_code == 0  # the writer's chain is whole


def test_a_quiet_file_with_an_old_tail_applies_at_the_short_settle(tmp_path):
    f, db = _session(tmp_path)
    assert run("persist-tools", f, "--min-chars", "100", "--db", db).exit_code == 0
    new = pend.pending_path(f).read_bytes()
    with open(f, "ab") as fh:  # a line after the snapshot, written a minute ago
        fh.write(f.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1] + b"\n")
    old = time.time() - 60
    os.utime(f, (old, old))
    r = run("apply", f, "--db", db, "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["applied"] and rep["discarded_lines"] == 1 and f.read_bytes() == new
    assert rep["settled_seconds"] == pend.SETTLE_SECONDS  # watched 400 ms, not until 2 s of quiet


def test_a_file_that_grew_just_now_applies_once_it_has_been_quiet_long_enough(tmp_path):
    f, db = _session(tmp_path)
    assert run("persist-tools", f, "--min-chars", "100", "--db", db).exit_code == 0
    with open(f, "ab") as fh:  # the writer's last line, just now; then it stopped
        fh.write(f.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1] + b"\n")
    t0 = time.monotonic()
    r = run("apply", f, "--db", db, "--json")
    took = time.monotonic() - t0
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["applied"] and rep["discarded_lines"] == 1
    # Read only once the line was LIVE_QUIET_SECONDS old (50 ms for the file system clock's granularity).
    assert took >= pend.LIVE_QUIET_SECONDS - 0.05, took
    assert pend.SETTLE_SECONDS < rep["settled_seconds"] <= pend.LIVE_QUIET_SECONDS \
        or (rep["settled_seconds"] == pend.SETTLE_SECONDS and took > pend.LIVE_QUIET_SECONDS)  # first look came late


def test_a_file_that_has_not_grown_keeps_the_short_settle_however_recent(tmp_path):
    f, db = _session(tmp_path)
    assert run("persist-tools", f, "--min-chars", "100", "--db", db).exit_code == 0
    os.utime(f)  # changed just now, but not past the snapshot
    r = run("apply", f, "--db", db, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["settled_seconds"] == pend.SETTLE_SECONDS
