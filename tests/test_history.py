"""history.jsonl in the catalog: read by refresh as it grows (and again
when Claude Code rewrites it), searchable, joined to the sessions, and the
sessions swept before txdb listed with their prompts; hostile files are one
warning, never a stopped refresh."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from conftest import copy_fixture_sessions, run
from txdb.catalog import db, history, search
from txdb.catalog.ingest.store import refresh

GONE_ID = "11111111-2222-3333-4444-555555555555"
ON_DISK_ID = "4e27c414-a885-46a0-b5c8-d58e1417377d"  # a session of tests/data/projects


def entry(display: str, ts: int, session: str | None = ON_DISK_ID, cwd: str = "/work/app", pastes=None) -> dict:
    e = {"display": display, "pastedContents": pastes or {}, "timestamp": ts, "project": cwd}
    if session:
        e["sessionId"] = session
    return e


def line(e: dict) -> bytes:
    # the real CLI's layout (2.1.332): compact JSON, one line per prompt
    return json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


@pytest.fixture
def config_dir(tmp_path) -> Path:
    cfg = tmp_path / "claude"
    copy_fixture_sessions(cfg / "projects")
    return cfg


def write(path: Path, *entries: dict, mode: str = "wb") -> None:
    with open(path, mode) as fh:
        for e in entries:
            fh.write(line(e))


def prompts(conn) -> list[tuple]:
    return conn.execute("SELECT session_id, display, timestamp FROM history ORDER BY timestamp_ms").fetchall()


def test_refresh_catalogues_the_prompts_and_then_only_what_was_appended(config_dir, tmp_path):
    h = config_dir / "history.jsonl"
    write(h, entry("fix the flaky test", 1760299086653), entry("now the docs", 1760299096653))
    conn = db.connect(tmp_path / "c.db")
    stats = refresh(conn, [config_dir / "projects"])
    assert stats.history_prompts == 2 and "2 prompts from history.jsonl" in stats.summary()
    assert prompts(conn) == [(ON_DISK_ID, "fix the flaky test", "2025-10-12T19:58:06.653Z"),
                             (ON_DISK_ID, "now the docs", "2025-10-12T19:58:16.653Z")]
    size = h.stat().st_size
    assert conn.execute("SELECT cursor, lines FROM history_files").fetchone() == (size, 2)

    write(h, entry("third", 1760299106653), mode="ab")
    w: list[str] = []
    s = history.refresh_roots(conn, [config_dir / "projects"], w)
    assert (s.lines, s.prompts, w) == (1, 1, [])  # read from the cursor: the one new line
    assert conn.execute("SELECT cursor, lines FROM history_files").fetchone() == (h.stat().st_size, 3)
    s = history.refresh_roots(conn, [config_dir / "projects"], w)
    assert (s.files, s.lines, s.prompts) == (0, 0, 0)  # unchanged: nothing read


def test_a_rewritten_file_is_read_again_and_pruned_prompts_stay(config_dir, tmp_path):
    """Claude Code prunes old entries by writing the file anew: what it
    dropped stays catalogued, what it kept is not doubled, what is new is read."""
    h = config_dir / "history.jsonl"
    write(h, entry("old one", 1700000000000), entry("kept one", 1760299086653))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [config_dir / "projects"])
    new = config_dir / "history.jsonl.tmp"
    write(new, entry("kept one", 1760299086653), entry("new one", 1760299096653))
    os.replace(new, h)  # another inode, shorter
    w: list[str] = []
    s = history.refresh_roots(conn, [config_dir / "projects"], w)
    assert (s.lines, s.prompts, w) == (2, 1, [])
    assert [p[1] for p in prompts(conn)] == ["old one", "kept one", "new one"]

    # truncated in place (same inode), then written again: read from the start too
    with open(h, "wb") as fh:
        fh.write(line(entry("after truncation", 1760299106653)))
    s = history.refresh_roots(conn, [config_dir / "projects"], w)
    assert (s.lines, s.prompts) == (1, 1)
    assert conn.execute("SELECT count(*) FROM history").fetchone()[0] == 4
    assert conn.execute("SELECT count(*) FROM history_fts WHERE history_fts MATCH 'truncation'").fetchone()[0] == 1


def test_a_last_line_without_its_newline_waits(config_dir, tmp_path):
    h = config_dir / "history.jsonl"
    write(h, entry("complete", 1760299086653))
    with open(h, "ab") as fh:
        fh.write(line(entry("half written", 1760299096653))[:-10])
    conn = db.connect(tmp_path / "c.db")
    w: list[str] = []
    assert history.refresh_roots(conn, [config_dir / "projects"], w).prompts == 1
    with open(h, "ab") as fh:
        fh.write(line(entry("half written", 1760299096653))[-10:])
    assert history.refresh_roots(conn, [config_dir / "projects"], w).prompts == 1
    assert [p[1] for p in prompts(conn)] == ["complete", "half written"] and w == []


def test_malformed_and_oversized_lines_are_one_warning_and_the_rest_is_read(config_dir, tmp_path):
    h = config_dir / "history.jsonl"
    with open(h, "wb") as fh:
        fh.write(line(entry("first", 1760299086653)))
        fh.write(b"not json\n[1, 2]\n\xff\xfe\n")
        fh.write(b'{"display": "' + b"x" * (history.MAX_LINE + 10) + b'"}\n')
        fh.write(line(entry("after the big one", 1e300)))  # a timestamp out of every range
        fh.write(line({"display": 7, "sessionId": ["x"], "timestamp": True, "project": None}))
    conn = db.connect(tmp_path / "c.db")
    stats = refresh(conn, [config_dir / "projects"])
    assert stats.new > 0 and stats.history_prompts == 3
    [w] = [w for w in stats.warnings if "history.jsonl" in w]
    assert "4 lines skipped" in w and "line 2, 3, 4, 5" in w
    rows = conn.execute("SELECT display, timestamp_ms, timestamp, session_id FROM history ORDER BY id").fetchall()
    assert rows == [("first", 1760299086653, "2025-10-12T19:58:06.653Z", ON_DISK_ID),
                    ("after the big one", None, None, ON_DISK_ID), (None, None, None, None)]


@pytest.mark.parametrize("what", ["fifo", "symlink", "folder"])
def test_a_fifo_symlink_or_folder_at_history_jsonl_is_one_warning(config_dir, tmp_path, what):
    h = config_dir / "history.jsonl"
    if what == "fifo":
        os.mkfifo(h)
    elif what == "symlink":
        target = tmp_path / "elsewhere.jsonl"
        write(target, entry("not read through a link", 1760299086653))
        h.symlink_to(target)
    else:
        h.mkdir()
    conn = db.connect(tmp_path / "c.db")
    done: list = []
    t = threading.Thread(target=lambda: done.append(refresh(conn, [config_dir / "projects"])), daemon=True)
    t.start()
    t.join(60)
    assert done, "refresh waited on history.jsonl"
    stats = done[0]
    [w] = [w for w in stats.warnings if "history.jsonl" in w]
    assert "not a regular file" in w or "directory" in w.lower()
    assert stats.new > 0 and conn.execute("SELECT count(*) FROM history").fetchone()[0] == 0


def test_search_finds_prompts_and_their_pastes(config_dir, tmp_path):
    write(config_dir / "history.jsonl",
          entry("[Pasted text #1 +3 lines] why does this fail", 1760299086653, session=GONE_ID,
                pastes={"1": {"id": 1, "type": "text", "content": "Traceback: quokka overflow"}}),
          entry("plain prompt about quokka", 1760299096653))
    conn = db.connect(tmp_path / "c.db")
    refresh(conn, [config_dir / "projects"])
    hits = search.search(conn, "quokka")
    assert {(h["kind"], h["session_id"]) for h in hits} == {("history", GONE_ID), ("history", ON_DISK_ID)}
    on_disk = next(h for h in hits if h["session_id"] == ON_DISK_ID)
    assert on_disk["file_id"] is not None and on_disk["title"]  # joined to the catalogued session
    assert search.search(conn, "quokka overflow", kind="history")[0]["excerpt"] == "Traceback: »quokka« »overflow«"
    assert search.search(conn, "quokka", kind="messages") == []
    # both indexes at once: a word of a transcript and of a prompt, ranked together, limited
    assert len(search.search(conn, "quokka", limit=1)) == 1


def test_history_sessions_tells_on_disk_gone_and_gone_before_txdb(config_dir, tmp_path):
    db_path = tmp_path / "c.db"
    write(config_dir / "history.jsonl",
          entry("swept long ago", 1700000000000, session=GONE_ID, cwd="/old/proj"),
          entry("and again", 1700000100000, session=GONE_ID, cwd="/old/proj"),
          entry("on disk", 1760299086653),
          entry("no session id (an older release)", 1600000000000, session=None))
    run("refresh", "--db", db_path, "--root", config_dir / "projects", ok=True)
    conn = db.connect(db_path)
    rows = {r["session_id"]: r for r in db.rows(conn, "SELECT * FROM history_sessions")}
    assert set(rows) == {GONE_ID, ON_DISK_ID}
    gone = rows[GONE_ID]
    assert (gone["status"], gone["prompts"], gone["cwd"], gone["project"], gone["first_prompt"], gone["last_prompt"],
            gone["first_prompt_text"], gone["file_id"]) == (
        "gone before txdb", 2, "/old/proj", "-old-proj", "2023-11-14T22:13:20.000Z", "2023-11-14T22:15:00.000Z",
        "swept long ago", None)
    assert rows[ON_DISK_ID]["status"] == "on disk"

    # the transcript vanishes after txdb catalogued it: gone (restorable), not "before txdb"
    next(config_dir.glob(f"projects/*/{ON_DISK_ID}.jsonl")).unlink()
    run("refresh", "--db", db_path, "--root", config_dir / "projects", ok=True)
    assert conn.execute("SELECT status FROM history_sessions WHERE session_id = ?", (ON_DISK_ID,)).fetchone() == (
        "gone",)

    r = run("history", "--db", db_path, "--before-txdb", "--json", ok=True)
    assert [s["session_id"] for s in json.loads(r.output)] == [GONE_ID]
    r = run("history", "--db", db_path, GONE_ID[:8], "--json", ok=True)
    assert [p["display"] for p in json.loads(r.output)] == ["swept long ago", "and again"]
    r = run("history", "--db", db_path, "ffffffff")
    assert r.exit_code == 1 and r.output.startswith("Error: history.jsonl holds no prompt")
    r = run("sessions", "--db", db_path, "--gone", "--table", ok=True)
    assert "1 more session gone before txdb" in r.stderr and ON_DISK_ID in r.stdout


def test_a_history_file_beside_a_root_not_named_projects_is_not_read(tmp_path):
    root = tmp_path / "sessions"
    copy_fixture_sessions(root)
    write(tmp_path / "history.jsonl", entry("not this one", 1760299086653))
    assert history.history_paths([root]) == []
    assert history.history_paths([tmp_path / "projects", tmp_path / "projects"]) == [tmp_path / "history.jsonl"]


def test_a_long_history_is_read_in_bounded_time_once(config_dir, tmp_path):
    """10,000 prompts are read once, streamed; the next refresh reads none of them."""
    h = config_dir / "history.jsonl"
    write(h, *(entry(f"prompt number {i}", 1760000000000 + i, session=f"s{i % 50}") for i in range(10000)))
    conn = db.connect(tmp_path / "c.db")
    w: list[str] = []
    assert history.refresh_roots(conn, [config_dir / "projects"], w).prompts == 10000
    s = history.refresh_roots(conn, [config_dir / "projects"], w)
    assert (s.lines, s.prompts) == (0, 0)
    assert conn.execute("SELECT count(*) FROM history_sessions WHERE status = 'gone before txdb'").fetchone() == (50,)


def test_a_pruned_session_is_pruned_not_gone_before_txdb(config_dir, tmp_path):
    """txdb catalogued it, its archive was then pruned: its own status, and
    not counted among the sessions gone before txdb (doctor, sessions --gone)."""
    db_path = tmp_path / "c.db"
    write(config_dir / "history.jsonl", entry("on disk once", 1760299086653),
          entry("swept long ago", 1700000000000, session=GONE_ID))
    run("refresh", "--db", db_path, "--root", config_dir / "projects", ok=True)
    next(config_dir.glob(f"projects/*/{ON_DISK_ID}.jsonl")).unlink()
    run("refresh", "--db", db_path, "--root", config_dir / "projects", ok=True)
    run("prune", "--db", db_path, ON_DISK_ID, ok=True)
    conn = db.connect(db_path)
    status = dict(conn.execute("SELECT session_id, status FROM history_sessions").fetchall())
    assert status == {ON_DISK_ID: "pruned", GONE_ID: "gone before txdb"}
    r = run("history", "--db", db_path, "--before-txdb", "--json", ok=True)
    assert [s["session_id"] for s in json.loads(r.output)] == [GONE_ID]
    r = run("sessions", "--db", db_path, "--gone", "--table", ok=True)
    assert "Note: 1 more session gone before txdb" in r.stderr
    r = run("doctor", "--db", db_path, "--root", config_dir / "projects", "--cwd", tmp_path, "--json", ok=True)
    assert json.loads(r.output)["history"]["gone_before_txdb"] == 1


def test_a_line_with_a_lone_surrogate_escape_is_kept(config_dir, tmp_path):
    """JSON.stringify writes a lone surrogate as an escape: legal JSON orjson
    refuses. The prompt is kept, the surrogate replaced, as refresh reads
    such a line of a session file; the line is counted as recovered."""
    h = config_dir / "history.jsonl"
    with open(h, "wb") as fh:
        fh.write(b'{"display":"a\\ud800b","pastedContents":{"1":{"id":1,"type":"text","content":"x\\udfffy"}},'
                 b'"timestamp":1760299086653,"project":"/work/app","sessionId":"' + ON_DISK_ID.encode() + b'"}\n')
        fh.write(line(entry("plain", 1760299096653)))
        # two writers' lines glued (each its own prompt), and invalid UTF-8 in a string: read as refresh reads a session
        fh.write(line(entry("glued one", 1760299097653))[:-1] + line(entry("glued two", 1760299098653)))
        fh.write(b'{"display":"bad \xff byte","timestamp":1760299099653}\n')
    conn = db.connect(tmp_path / "c.db")
    w: list[str] = []
    s = history.refresh_roots(conn, [config_dir / "projects"], w)
    assert (s.prompts, s.recovered, s.skipped, w) == (5, 3, 0, [])
    assert conn.execute("SELECT display, pasted_text, session_id, timestamp FROM history ORDER BY id").fetchall() == [
        ("a\ufffdb", "x\ufffdy", ON_DISK_ID, "2025-10-12T19:58:06.653Z"),
        ("plain", None, ON_DISK_ID, "2025-10-12T19:58:16.653Z"),
        ("glued one", None, ON_DISK_ID, "2025-10-12T19:58:17.653Z"),
        ("glued two", None, ON_DISK_ID, "2025-10-12T19:58:18.653Z"),
        ("bad \ufffd byte", None, None, "2025-10-12T19:58:19.653Z")]
    assert [json.loads(r)["display"] for (r,) in conn.execute("SELECT raw FROM history ORDER BY id")][2:4] == [
        "glued one", "glued two"]  # each its own object
    assert search.search(conn, "plain", kind="history")
    # read again from the start (a rewrite): the same key, nothing new
    h.write_bytes(h.read_bytes() + b"\n")
    os.utime(h)
    assert history.refresh_roots(conn, [config_dir / "projects"], w).prompts == 0


def test_project_filters_take_wildcards_literally(config_dir, tmp_path):
    """--project is a substring of the project folder's name (the cwd with
    every character but ASCII letters and digits as -), its _ and % taken as
    themselves, not as LIKE's wildcards."""
    db_path = tmp_path / "c.db"
    write(config_dir / "history.jsonl",
          entry("one", 1700000000000, session="a" * 8, cwd="/work/my_app"),
          entry("two", 1700000100000, session="b" * 8, cwd="/work/myxapp"),
          entry("three", 1700000200000, session="c" * 8, cwd="/work/100%"))
    run("refresh", "--db", db_path, "--root", config_dir / "projects", ok=True)

    def ids(*args):
        return sorted(s["session_id"] for s in json.loads(run("history", "--db", db_path, "--json", *args,
                                                              ok=True).output))
    assert ids() == ["a" * 8, "b" * 8, "c" * 8]
    assert ids("--project", "_") == [] and ids("--project", "%") == [] and ids("--project", "\\") == []
    assert ids("--project", "my_app") == []  # the folder is -work-my-app
    assert ids("--project", "my-app") == ["a" * 8]
    assert ids("--project", "MY-APP") == ["a" * 8]  # as before: ASCII case is ignored
    assert ids("--project", "-100-") == ["c" * 8]
    assert ids("--project", "app") == ["a" * 8, "b" * 8]


def test_the_table_says_why_nothing_is_listed_and_counts_prompts_with_no_session(config_dir, tmp_path, monkeypatch):
    """An empty filter is not an empty history; an older release's prompts
    (no sessionId) are counted where no session can list them; an id known
    only from history.jsonl is pointed at `txdb history`, not at a refresh."""
    db_path = tmp_path / "c.db"
    run("refresh", "--db", db_path, "--root", config_dir / "projects", ok=True)
    r = run("history", "--db", db_path, "--table", ok=True)
    assert r.output == "No prompts from history.jsonl in the catalog (run `txdb refresh` to read it).\n"

    write(config_dir / "history.jsonl",
          entry("swept long ago", 1700000000000, session=GONE_ID, cwd="/old/proj"),
          entry("no session id (an older release)", 1600000000000, session=None))
    run("refresh", "--db", db_path, "--root", config_dir / "projects", ok=True)
    r = run("history", "--db", db_path, "--project", "zzz", "--table", ok=True)
    assert r.output.splitlines() == [
        "No session of history.jsonl has a project containing 'zzz'.",
        "1 prompt names no session (an older release's): "
        "`txdb query \"select * from history where session_id is null\"`."]
    r = run("history", "--db", db_path, "--table", ok=True)
    assert GONE_ID[:8] in r.output and "gone before txdb" in r.output and "1 prompt names no session" in r.output
    assert json.loads(run("history", "--db", db_path, "--json", ok=True).output)[0]["session_id"] == GONE_ID

    for cmd in (("restore", GONE_ID[:8]), ("analyze", GONE_ID[:8])):
        r = run(*cmd, "--db", db_path)
        assert r.exit_code == 1
        assert r.output.strip() == (f"Error: no session {GONE_ID[:8]!r} in the catalog: txdb never saw its "
                                    f"transcript; history.jsonl keeps its prompts (`txdb history {GONE_ID[:8]}`)")
    r = run("restore", "ffffffff", "--db", db_path)
    assert r.output.strip() == "Error: no session 'ffffffff' in the catalog (run `txdb refresh`?)"

    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config_dir))
    doc = run("doctor", "--db", db_path, "--cwd", tmp_path, ok=True)
    assert "History: 2 prompts (1 naming no session) of 1 session from history.jsonl" in doc.output


def test_a_timestamp_of_thousands_of_digits_is_one_prompt_not_a_stopped_refresh(config_dir, tmp_path):
    db_path = tmp_path / "c.db"
    path = config_dir / "history.jsonl"
    path.write_bytes(b'{"display":"huge","timestamp":' + b"9" * 5000 + b',"sessionId":"' + GONE_ID.encode() + b'"}\n')
    write(path, entry("after it", 1700000000000, session=GONE_ID), mode="ab")
    run("refresh", "--db", db_path, "--root", config_dir / "projects", ok=True)
    conn = db.connect(db_path)
    assert sorted(r[1] for r in prompts(conn)) == ["after it", "huge"]
    write(path, entry("one more", 1700000200000, session=GONE_ID), mode="ab")
    assert ", 1 prompt from history.jsonl" in run("refresh", "--db", db_path, "--root", config_dir / "projects",
                                                  ok=True).output
