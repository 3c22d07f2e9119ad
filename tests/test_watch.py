"""`txdb refresh --watch` and `txdb serve --watch`: a real watcher on real
files, in a subprocess, judged by what the catalog holds."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest


from sessions import append, conversation, dumps, user, write
from txdb.catalog.ingest.chunks import json_function

TXDB = [sys.executable, "-m", "txdb.cli"]
TIMEOUT = 15.0  # generous for a loaded machine: the watcher is meant to take under a second


def poll(check, timeout=TIMEOUT):
    """The first truthy value of ``check()`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def scalar(db: Path, sql: str, params=()):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.create_function("txdb_json", 2, json_function(conn))
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        return conn.execute(sql, params).fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return None
    finally:
        conn.close()


def lines_of(db: Path, path: Path) -> int:
    return scalar(db, "SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id WHERE f.path = ?",
                  (str(path),)) or 0


def start(args, tmp_path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([*TXDB, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=tmp_path)


def wait_ready(proc: subprocess.Popen) -> str:
    """stderr up to the watcher's 'Watching' line."""
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode()
        if not line:
            break
        seen.append(line)
        if line.startswith("Watching "):
            return "".join(seen)
    proc.kill()
    raise AssertionError(f"the watcher never said it was ready: {''.join(seen)!r}")


def interrupt(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, err.decode()


def assert_consistent(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # Each file's cursor and line count match the rows committed for it.
        for fid, cursor, lines in conn.execute("SELECT id, cursor, lines FROM files WHERE gone = 0"):
            n, end = conn.execute(
                "SELECT count(*), max(offset + length) FROM "
                "(SELECT offset, length FROM records WHERE file_id = ? "
                " UNION SELECT offset, length FROM parse_errors WHERE file_id = ?)", (fid, fid)).fetchone()
            nl = conn.execute("SELECT count(DISTINCT line) FROM "
                              "(SELECT line FROM records WHERE file_id = ? UNION SELECT line FROM parse_errors "
                              "WHERE file_id = ?)", (fid, fid)).fetchone()[0]
            assert nl == lines, fid
            assert end is None or end <= cursor, fid
    finally:
        conn.close()


def test_refresh_watch_follows_appends_new_sessions_and_new_projects(tmp_path):
    root = tmp_path / "projects"
    first = write(root / "-home-me-app" / "a.jsonl", conversation(2, session="a"))
    db = tmp_path / "c.db"
    proc = start(["refresh", "--watch", "--root", str(root), "--db", str(db)], tmp_path)
    try:
        wait_ready(proc)
        assert lines_of(db, first) == 8

        # A partial last line waits for its newline ...
        line = dumps(user("typed while watched", session="a"))
        with open(first, "ab") as fh:
            fh.write(line[:25])
        time.sleep(1.5)
        assert lines_of(db, first) == 8
        with open(first, "ab") as fh:
            fh.write(line[25:] + b"\n")
        assert poll(lambda: lines_of(db, first) == 9)
        assert scalar(db, "SELECT count(*) FROM records WHERE txdb_json(file_id, offset) LIKE '%typed while watched%'") == 1

        # ... a new session file in a known project, and one in a new project folder.
        second = write(root / "-home-me-app" / "b.jsonl", conversation(1, session="b"))
        assert poll(lambda: lines_of(db, second) == 4)
        third = write(root / "-home-me-other" / "c.jsonl", conversation(1, session="c"))
        assert poll(lambda: lines_of(db, third) == 4)
        assert scalar(db, "SELECT project FROM files WHERE path = ?", (str(third),)) == "-home-me-other"

        # A deleted file is marked gone, as `txdb refresh` marks it.
        second.unlink()
        assert poll(lambda: scalar(db, "SELECT gone FROM files WHERE path = ?", (str(second),)) == 1)

        # Writes keep coming until Ctrl-C.
        append(first, user("one more", session="a"))
        assert poll(lambda: lines_of(db, first) == 10)
    finally:
        rc, err = interrupt(proc)
    assert rc in (0, 130), err
    assert "Traceback" not in err
    assert_consistent(db)


def test_ctrl_c_during_a_stream_of_writes_leaves_a_consistent_catalog(tmp_path):
    root = tmp_path / "projects"
    path = write(root / "-p" / "s.jsonl", conversation(1, session="s"))
    db = tmp_path / "c.db"
    proc = start(["refresh", "--watch", "--root", str(root), "--db", str(db)], tmp_path)
    try:
        wait_ready(proc)
        # Large lines, written steadily, so the interrupt lands mid-ingest
        # now and then; whatever it hits, each file is whole or not there.
        for i in range(40):
            append(path, user("x" * 200_000 + str(i), session="s"))
            if i == 30:
                proc.send_signal(signal.SIGINT)
            time.sleep(0.02)
    finally:
        rc, err = interrupt(proc) if proc.poll() is None else (proc.returncode, proc.stderr.read().decode())
    assert rc in (0, 130), err
    assert "Traceback" not in err
    assert_consistent(db)
    # The next refresh reads on from the cursor the watcher committed.
    r = subprocess.run([*TXDB, "refresh", "--root", str(root), "--db", str(db)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert lines_of(db, path) == 44


def test_refresh_watch_without_a_sessions_folder_is_one_error_line(tmp_path):
    r = subprocess.run([*TXDB, "refresh", "--watch", "--root", str(tmp_path / "nope"), "--db",
                        str(tmp_path / "c.db")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"Error: nothing to watch: no sessions folder at {tmp_path / 'nope'} (set --root or CLAUDE_CONFIG_DIR)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_watch_shows_a_new_line_to_the_browser(tmp_path):
    root = tmp_path / "projects"
    path = write(root / "-home-me-app" / "a.jsonl", conversation(1, session="a"))
    db = tmp_path / "live.db"
    port = free_port()
    proc = start(["serve", "--watch", "--root", str(root), "--db", str(db), "--port", str(port)], tmp_path)

    def count(needle: str):
        sql = "select count(*) as n from records where txdb_json(file_id, offset) like :p"
        url = f"http://127.0.0.1:{port}/live.json?" + urllib.parse.urlencode(
            {"sql": sql, "p": f"%{needle}%", "_shape": "array"})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())[0]["n"]
        except OSError:
            return None

    try:
        wait_ready(proc)
        assert poll(lambda: count("prompt 0") == 1)
        append(path, user("seen from the browser", session="a"))
        assert poll(lambda: count("seen from the browser") == 1)
        new = write(root / "-home-me-new" / "b.jsonl", [user("a new project, live", session="b")])
        assert poll(lambda: count("a new project, live") == 1)
        assert lines_of(db, new) == 1
    finally:
        rc, err = interrupt(proc)
    assert rc in (0, 130), err
    assert "Traceback" not in err
    assert_consistent(db)


@pytest.mark.parametrize("args", [["refresh", "--watch"], ["serve", "--watch"], ["serve"]])
def test_ctrl_c_exits_130_for_every_long_running_command(tmp_path, args):
    """One convention, the shell's for SIGINT: 128 + 2, whether the command
    is a watcher, a server, or both."""
    root = tmp_path / "projects"
    write(root / "-p" / "s.jsonl", conversation(1, session="s"))
    db = tmp_path / "c.db"
    r = subprocess.run([*TXDB, "refresh", "--root", str(root), "--db", str(db)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    port = free_port()
    extra = ["--port", str(port)] if args[0] == "serve" else []
    proc = start([*args, "--root", str(root), "--db", str(db), *extra], tmp_path)
    try:
        if "--watch" in args:
            wait_ready(proc)

        def answers():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/c.json", timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False
        if args[0] == "serve":
            assert poll(answers)
    finally:
        rc, err = interrupt(proc)
    assert rc == 130, err
    assert "Traceback" not in err


def test_a_file_name_that_is_not_utf8_is_named_and_the_watch_goes_on(tmp_path):
    """Paths may be any bytes: a session file whose name is not UTF-8 is
    named (its bytes escaped), never catalogued, and the watcher keeps
    following the other files."""
    root = tmp_path / "projects"
    first = write(root / "-home-me-app" / "a.jsonl", conversation(1, session="a"))
    db = tmp_path / "c.db"
    proc = start(["refresh", "--watch", "--root", str(root), "--db", str(db)], tmp_path)
    try:
        wait_ready(proc)
        odd = os.path.join(os.fsencode(root / "-home-me-app"), b"caf\xe9.jsonl")
        with open(odd, "wb") as fh:
            fh.write(b"".join(dumps(o) + b"\n" for o in conversation(1, session="odd")))
        time.sleep(1.5)
        second = write(root / "-home-me-app" / "b.jsonl", conversation(1, session="b"))
        assert poll(lambda: lines_of(db, second) == 4)
        append(first, user("one more", session="a"))
        assert poll(lambda: lines_of(db, first) == 5)
    finally:
        rc, err = interrupt(proc)
    assert rc in (0, 130), err
    assert "Traceback" not in err
    assert "caf\\xE9.jsonl" in err or "caf\\xe9.jsonl" in err, err
    assert scalar(db, "SELECT count(*) FROM files") == 2
