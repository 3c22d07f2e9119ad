"""An attacker's view of txdb: a web page reaching the local server through
DNS rebinding, a session title full of terminal escapes, a "read-only"
query that tries to write files, files readable by other users, and the
small ways a command can fall over (a port out of range, a huge id, Ctrl-C
in a runaway query, a closed pipe). Real servers on loopback ports, real
subprocesses, real files."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from wcwidth import wcswidth

from txdb.catalog import db
from txdb.web.metadata import metadata_path
from txdb.catalog.ingest.bulk import refresh_db

from conftest import DATA
from test_datasette_session import free_port, stop, wait_for

BIN = Path(sys.executable).parent
TXDB = str(BIN / "txdb")
TOOLS = "-tmp-txdb-cli-fixtures-tools-demo"
TOOLS_ID = "0ff9cf6e-e3b0-420c-913e-806c2aa938aa"
SUBAGENT = "-tmp-txdb-cli-fixtures-subagent-demo"
ESC = "\x1b"
HOSTILE_TITLE = f"pay{ESC}]8;;http://evil.example/{ESC}\\click me{ESC}]8;;{ESC}\\ now{ESC}[2J\x9b31m\x07\x7f\rfake"
SLOW_CTE = "with recursive r(n) as (select 1 union all select n + 1 from r) select count(*) from r"


def cli_projects(root: Path, *names: str) -> Path:
    for name in names or (TOOLS, SUBAGENT):
        shutil.copytree(DATA / "cli" / name, root / name)
    return root


def set_title(root: Path, title: str, folder: str = TOOLS, session_id: str = TOOLS_ID) -> None:
    path = root / folder / f"{session_id}.jsonl"
    with open(path, "ab") as fh:
        fh.write(orjson.dumps({"type": "custom-title", "customTitle": title, "sessionId": session_id}) + b"\n")


def txdb(*args, db_path, check=False, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "TXDB_DB": str(db_path)}
    env.pop("CLAUDE_CODE_SESSION_ID", None)
    r = subprocess.run([TXDB, *map(str, args)], capture_output=True, text=True, env=env, timeout=120, **kw)
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    root = cli_projects(tmp / "projects")
    set_title(root, HOSTILE_TITLE)
    path = tmp / "catalog.db"
    refresh_db(path, [root])
    conn = sqlite3.connect(path)
    fid = conn.execute("SELECT file_id FROM sessions WHERE session_id = ? AND title IS NOT NULL",
                       (TOOLS_ID,)).fetchone()[0]
    conn.close()
    return {"path": path, "fid": fid, "root": root}


# -- 9. DNS rebinding: only loopback Host names are answered --------------------

def request(port: int, path: str, host: str | None) -> tuple[int, str]:
    """GET ``path`` from 127.0.0.1:``port`` with the Host header ``host`` (None: none sent)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            c.putheader("Host", host)
        c.endheaders()
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def forged_hosts(port: int) -> list[str | None]:
    return [f"attacker.example:{port}", "attacker.example", f"127.0.0.1.attacker.example:{port}",
            f"localhost.attacker.example:{port}", f"attacker.example:{port}@127.0.0.1", f"10.0.0.5:{port}",
            f"0.0.0.0:{port}", f"[::ffff:7f00:1]:{port}", f"127.0.0.1:{port + 1}", "127.1", "",
            f"[::1]x:{port}", f"localhost:{port}x", None]


def loopback_hosts(port: int) -> list[str]:
    return [f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "LOCALHOST", f"127.8.9.10:{port}",
            f"[::1]:{port}", "[::1]"]


def check_host_guard(port: int, fid: int, db_name: str) -> None:
    paths = ["/", f"/{db_name}.json", f"/{db_name}/sessions.json?_shape=array",
             f"/{db_name}.json?sql=select+title+from+sessions", "/-/versions.json", "/-/databases.json",
             "/-/static/app.css", "/-/txdb/txdb.css", f"/-/txdb/session/{fid}"]
    for path in paths:
        for host in forged_hosts(port):
            status, body = request(port, path, host)
            assert status == 400, (path, host, status)
            assert TOOLS_ID not in body and "click me" not in body and "txdb" not in body.split("txdb server")[-1]
    for host in loopback_hosts(port):
        status, body = request(port, f"/{db_name}/sessions.json?_shape=array", host)
        assert status == 200, (host, status)
        assert TOOLS_ID in body
    status, body = request(port, f"/-/txdb/session/{fid}", f"localhost:{port}")
    assert status == 200 and "hello-from-bash" in body


def test_txdb_serve_answers_loopback_hosts_only(built):
    port = free_port()
    proc = subprocess.Popen([TXDB, "serve", "--db", str(built["path"]), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(f"http://127.0.0.1:{port}/", proc)
        check_host_guard(port, built["fid"], "catalog")
    finally:
        stop(proc)


def test_plain_datasette_serving_a_catalog_answers_loopback_hosts_only(built):
    port = free_port()
    proc = subprocess.Popen([str(BIN / "datasette"), "serve", str(built["path"]), "-m", metadata_path(),
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(f"http://127.0.0.1:{port}/", proc)
        check_host_guard(port, built["fid"], "catalog")
    finally:
        stop(proc)


def test_plain_datasette_without_a_catalog_is_left_alone(tmp_path):
    """The plugin is installed for every Datasette: one serving no txdb catalog keeps its own rules."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE t (x)")
        c.execute("INSERT INTO t VALUES ('hello')")
    port = free_port()
    proc = subprocess.Popen([str(BIN / "datasette"), "serve", str(other), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(f"http://127.0.0.1:{port}/", proc)
        status, body = request(port, "/other/t.json?_shape=array", "intranet.example")
        assert status == 200 and "hello" in body
    finally:
        stop(proc)


@pytest.mark.parametrize("host,port,ok", [
    ("127.0.0.1:8001", 8001, True), ("localhost", 8001, True), ("[::1]:8001", 8001, True),
    ("127.255.0.1:8001", 8001, True), ("Localhost:8001", 8001, True), ("localhost:9", None, True),
    ("localhost:8002", 8001, False), ("evil.example:8001", 8001, False), ("::1", 8001, False),
    ("[127.0.0.1]:8001", 8001, False), ("127.0.0.1:+8001", 8001, False), ("127.0.0.1:８００１", 8001, False),
    ("[::1", 8001, False), ("localhost:", 8001, False), ("", 8001, False), (None, 8001, False),
])
def test_loopback_host_names(host, port, ok):
    from txdb.web.hostcheck import loopback_host

    assert loopback_host(host, port) is ok


# -- 10. terminal escapes: printed as inert text --------------------------------

def assert_inert(text: str) -> None:
    assert ESC not in text and "\x9b" not in text and "\x07" not in text and "\x7f" not in text
    assert "\r" not in text.replace("\r\n", "\n")


def test_a_hostile_title_prints_inert_everywhere(built, tmp_path):
    p = built["path"]
    table = txdb("sessions", "--table", db_path=p, check=True).stdout
    assert_inert(table)
    assert "\\x1b]8;;http://evil.example/" in table and "\\x1b[2J" in table
    analyze = txdb("analyze", TOOLS_ID, db_path=p, check=True).stdout
    assert_inert(analyze)
    assert "Title: pay\\x1b]8;;http://evil.example/\\x1b\\click me" in analyze
    for fmt in ("--csv", "--table"):
        out = txdb("query", "select title from sessions where title_source = 'custom-title'", fmt, db_path=p,
                   check=True).stdout
        assert_inert(out)
    # JSON keeps the title exactly, escaped
    for fmt in ("--json", "--nl"):
        out = txdb("query", "select title from sessions where title_source = 'custom-title'", fmt, db_path=p,
                   check=True).stdout
        assert_inert(out)
        rows = orjson.loads(out) if fmt == "--json" else [orjson.loads(line) for line in out.splitlines()]
        assert rows == [{"title": HOSTILE_TITLE}]
    # an error line quoting what the user (or a script) passed
    r = txdb("analyze", f"{ESC}[2J{ESC}]0;pwned\x07", db_path=p)
    assert r.returncode == 1
    assert r.stderr == "Error: no session '\\x1b[2J\\x1b]0;pwned\\x07' in the catalog (run `txdb refresh`?)\n"
    assert_inert(r.stderr)


def test_the_plan_table_prints_a_hostile_title_inert(built, tmp_path):
    work = tmp_path / "w"
    shutil.copytree(built["root"], work / "projects")
    path = work / "catalog.db"
    refresh_db(path, [work / "projects"])
    r = txdb("strip-tools", "--where", f"session_id = '{TOOLS_ID}'", "--dry-run", db_path=path, check=True)
    assert_inert(r.stdout)
    assert "pay\\x1b]8;;http://evil" in r.stdout


# -- 11. a read-only query writes no file ----------------------------------------

@pytest.mark.parametrize("sql,what", [
    ("vacuum into '{out}'", "ATTACH or VACUUM (it would write {out})"),
    ("VACUUM INTO '{out}'", "ATTACH or VACUUM (it would write {out})"),
    ("attach database '{out}' as e", "ATTACH or VACUUM (it would write {out})"),
    ("attach '{out}' as e", "ATTACH or VACUUM (it would write {out})"),
    ("vacuum", "ATTACH or VACUUM"),
    ("create temp table t as select 1", "INSERT on sqlite_temp_master"),
    ("pragma user_version = 7", "PRAGMA user_version = 7"),
    ("begin immediate", "TRANSACTION"),
])
def test_query_refuses_what_writes(built, tmp_path, sql, what):
    out = tmp_path / "exfil.db"
    before = sorted(p.name for p in built["path"].parent.iterdir())
    r = txdb("query", sql.format(out=out), db_path=built["path"])
    assert r.returncode == 1, r.stdout
    assert r.stderr == (f"Error: query refused: {what.format(out=out)} is not allowed: queries only read "
                        "(SELECT, WITH, schema PRAGMAs)\n")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    after = {p.name for p in built["path"].parent.iterdir()}
    assert after - set(before) <= {"catalog.db-wal", "catalog.db-shm"}  # SQLite's own, beside the catalog


def test_query_still_reads_everything(built):
    p = built["path"]
    for sql in ("select count(*) as n from records",
                "select name from pragma_table_info('records') limit 1",
                "pragma table_info(records)",
                "pragma user_version",
                "with recursive r(n) as (select 1 union all select n + 1 from r where n < 5) select sum(n) as s from r",
                "select json_extract(txdb_json(file_id, offset), '$.type') as t from records limit 1"):
        r = txdb("query", sql, "--json", db_path=p)
        assert r.returncode == 0, (sql, r.stderr)
        assert orjson.loads(r.stdout)


def test_the_where_condition_runs_on_the_same_guarded_connection(built):
    """A --where condition is an expression (no ATTACH or VACUUM can be
    written in one); it runs where `txdb query` runs, with the same
    authorizer: a PRAGMA outside the read-only list is refused there too."""
    r = txdb("strip-tools", "--where", "exists (select 1 from pragma_integrity_check)", "--dry-run",
             db_path=built["path"])
    assert r.returncode == 1
    assert r.stderr == ("Error: --where over block_targets: refused: PRAGMA integrity_check is not allowed: "
                        "queries only read (SELECT, WITH, schema PRAGMAs)\n")


# -- 12. every file txdb writes is private ------------------------------------------

def modes(folder: Path) -> dict[str, int]:
    out = {}
    for p in folder.iterdir():
        try:
            out[p.name] = stat.S_IMODE(p.lstat().st_mode)
        except FileNotFoundError:
            pass
    return out


BUILD_WATCHING_MODES = """
import json, os, stat, sys
from pathlib import Path
from txdb.catalog.ingest.bulk import refresh_db
folder = Path(sys.argv[1]).parent
seen = {}
def look(done=0, total=0):
    for p in folder.iterdir():
        try:
            seen[p.name] = stat.S_IMODE(p.lstat().st_mode)
        except FileNotFoundError:
            pass
refresh_db(Path(sys.argv[1]), [Path(sys.argv[2])], progress=look)
look()
print(json.dumps(seen))
"""


def test_first_build_writes_only_private_files(tmp_path):
    """In a process of its own, watching the folder while it builds: the
    scratch catalog, its journal and the published catalog."""
    root = cli_projects(tmp_path / "projects")
    folder = tmp_path / "cat"
    folder.mkdir()
    r = subprocess.run([sys.executable, "-c", BUILD_WATCHING_MODES, str(folder / "catalog.db"), str(root)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    seen = orjson.loads(r.stdout)
    assert "catalog.db" in seen
    assert any(".building-" in name for name in seen), seen  # the scratch catalog was seen
    assert {name: oct(m) for name, m in seen.items() if m != 0o600} == {}


@pytest.mark.parametrize("first", ["db.connect", "refresh"])
def test_an_open_catalog_and_its_wal_and_shm_are_private(tmp_path, first):
    folder = tmp_path / "cat"
    path = folder / "catalog.db"
    if first == "refresh":
        refresh_db(path, [cli_projects(tmp_path / "projects")])
    conn = db.connect(path)  # the first open of sessions, query, analyze, verify, surgery and serve
    try:
        conn.execute("SELECT count(*) FROM files").fetchone()
        found = modes(folder)
        assert {"catalog.db", "catalog.db-wal", "catalog.db-shm"} <= set(found)
        assert {name: oct(m) for name, m in found.items() if m != 0o600} == {}
    finally:
        conn.close()


# (sessions, query and the other reading commands make no catalog: tests/test_cli.py)
@pytest.mark.parametrize("args", [["refresh", "--root", "{root}"], ["analyze", TOOLS_ID], ["verify", TOOLS_ID]])
def test_each_command_first_opening_the_catalog_leaves_private_files(tmp_path, args):
    root = cli_projects(tmp_path / "projects")
    folder = tmp_path / "cat"
    path = folder / "catalog.db"
    if args[0] in ("analyze", "verify"):
        refresh_db(path, [root])
        shutil.move(path, tmp_path / "moved.db")  # a command given a path refreshes it into a new catalog
        args = [args[0], str(root / TOOLS / f"{TOOLS_ID}.jsonl")]
    txdb(*[a.format(root=root) for a in args], db_path=path, check=True)
    found = modes(folder)
    assert "catalog.db" in found
    assert {name: oct(m) for name, m in found.items() if m != 0o600} == {}


def test_serve_first_opening_the_catalog_leaves_private_files(tmp_path):
    folder = tmp_path / "cat"
    path = folder / "new.db"
    port = free_port()
    (tmp_path / "projects").mkdir()  # serve makes a catalog only with --watch (its writer)
    proc = subprocess.Popen([TXDB, "serve", "--watch", "--root", str(tmp_path / "projects"), "--db", str(path),
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(f"http://127.0.0.1:{port}/new/sessions.json", proc)
        found = modes(folder)  # while it serves: the catalog, -wal and -shm of its read connections
        assert "new.db" in found
        assert {name: oct(m) for name, m in found.items() if m != 0o600} == {}
    finally:
        stop(proc)


# -- smaller ------------------------------------------------------------------------

def test_serve_port_out_of_range_is_one_error_line(built):
    for port in ("70000", "-1", "99999999999999999999"):
        r = txdb("serve", "--port", port, db_path=built["path"])
        assert r.returncode == 2
        assert r.stderr.splitlines()[-1] == (f"Error: Invalid value for '-p' / '--port': {port} is not in the "
                                             "range 0<=x<=65535."), r.stderr


def test_odd_session_ids_are_404_pages(built):
    port = free_port()
    proc = subprocess.Popen([TXDB, "serve", "--db", str(built["path"]), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(f"http://127.0.0.1:{port}/", proc)
        host = f"127.0.0.1:{port}"
        for path in ("/-/txdb/session/99999999999999999999999", "/-/txdb/session/9223372036854775808",
                     "/-/txdb/session/9223372036854775807", "/-/txdb/session/-1", "/-/txdb/session/abc",
                     "/-/txdb/session/" + "9" * 5000, "/-/txdb/session/~D9~A3",
                     f"/-/txdb/session/{built['fid']}?db=_internal", f"/-/txdb/session/{built['fid']}?db=nope"):
            status, body = request(port, path, host)
            assert status == 404, (path[:60], status, body[:300])
            assert "Traceback" not in body
        status, _ = request(port, f"/-/txdb/session/{built['fid']:020d}", host)
        assert status == 200
    finally:
        stop(proc)


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def opened(pid: int, path: Path) -> bool:
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == str(path):
                return True
        except OSError:
            pass
    return False


def interrupt_when_running(proc, catalog: Path) -> tuple[int, str, float]:
    """SIGINT once the query runs (the catalog is open and half a second of
    CPU was spent since), then wait for the end."""
    deadline = time.monotonic() + 60
    while not opened(proc.pid, catalog):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the catalog was never opened"
        time.sleep(0.02)
    start = cpu_ticks(proc.pid)
    while cpu_ticks(proc.pid) - start < os.sysconf("SC_CLK_TCK") // 2:
        assert proc.poll() is None, proc.communicate()  # still running: it does not end by itself
        assert time.monotonic() < deadline, "the query never ran"
        time.sleep(0.05)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("Ctrl-C did not stop the query")
    return proc.returncode, err, time.monotonic() - t0


@pytest.mark.parametrize("args", [["query", SLOW_CTE],
                                  ["strip-tools", "--dry-run", "--where", f"({SLOW_CTE}) > 0"]])
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc to see the query running")
def test_ctrl_c_stops_a_runaway_query(built, tmp_path, args):
    path = tmp_path / "catalog.db"
    shutil.copy(built["path"], path)
    proc = subprocess.Popen([TXDB, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TXDB_DB": str(path)})
    rc, err, took = interrupt_when_running(proc, path)
    assert rc == 130, err
    assert "Traceback" not in err and "Error" not in err
    assert took < 5


@pytest.mark.parametrize("fmt", ["--nl", "--csv", "--json", "--table"])
def test_a_closed_pipe_ends_quietly(built, fmt):
    sql = "with recursive r(n) as (select 1 union all select n + 1 from r where n < 300000) select n from r"
    proc = subprocess.Popen([TXDB, "query", sql, fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TXDB_DB": str(built["path"])})
    head = proc.stdout.read(100)  # `| head -c 100`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=60)
    assert len(head) == 100
    assert err == ""
    assert rc == 0  # the reader had what it wanted


def test_the_plan_table_names_subagents_and_aligns_wide_titles(tmp_path):
    root = cli_projects(tmp_path / "projects")
    set_title(root, "会話の整理と要約テスト")
    set_title(root, "delegate the search", SUBAGENT, "417214f1-6c0e-4027-bf91-3e2fe84fe3fd")
    path = tmp_path / "catalog.db"
    refresh_db(path, [root])
    conn = sqlite3.connect(path)
    parent_id, parent_title = conn.execute(
        "SELECT s.session_id, s.title FROM sessions s JOIN files f ON f.id = s.file_id "
        "WHERE f.path LIKE '%subagent-demo%' AND f.kind = 'session'").fetchone()
    agent = conn.execute("SELECT path FROM files WHERE kind = 'subagent'").fetchone()[0]
    conn.close()
    r = txdb("strip-tools", "--where", "kind = 'tool_result'", "--dry-run", db_path=path, check=True)
    lines = r.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("session"))
    table = lines[header:header + 2 + 3]
    agent_row = next(line for line in table if line.startswith(Path(agent).stem[:12]))  # its name, clipped
    assert f" of {parent_id[:8]}" in agent_row.split("  ")[0]
    assert parent_title == "delegate the search"
    # the transcript's own title (one rule: its first prompt, as it has no set title), not its parent's
    assert "SUBAGENT-TASK: list the project files" in agent_row and parent_title not in agent_row
    assert any("会話" in line for line in table)
    # padded by display width: each row's "targets" (right-aligned) ends under the header's
    ends = set()
    for line in [table[0]] + table[2:]:
        session, title, targets = re.split(r"\s{2,}", line.strip())[:3]
        at = line.index(targets, len(session) + len(title))
        ends.add(wcswidth(line[:at + len(targets)]))
    assert len(ends) == 1, table
