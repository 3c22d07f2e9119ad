"""`txdb waste`: each kind of waste found where it is, priced, and a
reclaim command whose plan (a real dry run) removes it."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import run as txdb
from sessions import append, assistant, attachment, user, write

BIG = "x" * 40000  # ~10k tokens


def _session(root):
    """Reads a file twice, gets one large result, a superseded reminder, and idles 20 minutes."""
    objs, parent, i = [], None, 0

    def turn(content_blocks, result=None, minute=0):
        nonlocal parent, i
        i += 1
        ts = f"2026-11-01T10:{minute:02d}:{i:02d}.000Z"
        a = assistant(content_blocks, parent, session="s-waste", msg_id=f"msg_w{i}", timestamp=ts,
                      requestId=f"req_w{i}", model="claude-sonnet-4-5",
                      usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 1000 * i,
                             "cache_creation_input_tokens": 50000 if minute >= 30 else 100})
        objs.append(a)
        parent = a["uuid"]
        if result is not None:
            u = user([result], parent, session="s-waste", timestamp=ts)
            objs.append(u)
            parent = u["uuid"]

    u0 = user("read the file twice", session="s-waste", timestamp="2026-11-01T10:00:00.000Z")
    objs.append(u0)
    parent = u0["uuid"]
    for n, (tid, path, body) in enumerate([("toolu_r1", "/app/a.py", "old " * 3000),
                                           ("toolu_big", "/app/big.log", BIG),
                                           ("toolu_r2", "/app/a.py", "new " * 3000)]):
        turn([{"type": "tool_use", "id": tid, "name": "Read", "input": {"file_path": path}}],
             {"type": "tool_result", "tool_use_id": tid, "content": body}, minute=n)
        if n == 0:
            for k in range(2):
                att = attachment({"type": "task_reminder", "content": [{"id": str(k), "subject": "todo " * 50}],
                                  "itemCount": 1}, parent, session="s-waste")
                objs.append(att)
                parent = att["uuid"]
    turn("done", minute=3)
    turn("after lunch", minute=30)  # 27 minutes idle: the cache is written again
    write(root / "-app" / "s-waste.jsonl", objs)


@pytest.fixture
def catalog(tmp_path):
    root = tmp_path / "projects"
    _session(root)
    db = tmp_path / "c.db"
    txdb("refresh", "--root", root, "--db", db, ok=True)
    return db


def test_each_kind_is_found_where_it_is(catalog):
    conn = sqlite3.connect(catalog)
    items = conn.execute("SELECT kind, item, detail, resent_turns, usd FROM waste_items ORDER BY kind, pos").fetchall()
    kinds = {k for k, *_ in items}
    assert kinds == {"large_result", "repeated_read", "reminder", "cache_rebuild"}
    reads = [r for r in items if r[0] == "repeated_read"]
    assert [(r[1], r[2]) for r in reads] == [("toolu_r1", "/app/a.py")]  # the older copy only
    assert [r[1] for r in items if r[0] == "large_result"] == ["toolu_big"]
    assert len([r for r in items if r[0] == "reminder"]) == 1  # the newest reminder stays
    (rebuild,) = [r for r in items if r[0] == "cache_rebuild"]
    assert rebuild[2] == "27 min idle"
    # priced at the model's cache prices: a re-sent item per later turn, a rebuild at the write premium
    (read_p, write_p) = conn.execute("SELECT cache_read_mtok, cache_write_5m_mtok FROM prices WHERE model = "
                                     "'claude-sonnet-4-5' AND above_tokens = 0 ORDER BY valid_from DESC").fetchone()
    (tok, turns, usd) = conn.execute("SELECT tokens, resent_turns, usd FROM waste_items WHERE item = 'toolu_big'"
                                     ).fetchone()
    assert turns == 3 and usd == pytest.approx(tok * turns * read_p / 1e6, rel=1e-6)
    assert rebuild[4] == pytest.approx(50000 * (write_p - read_p) / 1e6, rel=1e-6)


def test_the_reclaim_commands_plans_remove_what_the_rows_name(catalog):
    rows = json.loads(txdb("waste", "s-waste", "--plan", "--db", catalog, "--json", ok=True).output)
    by_kind = {r["kind"]: r for r in rows}
    for kind in ("large_result", "repeated_read", "reminder"):
        assert by_kind[kind]["plan_saves"] > 0, by_kind[kind]
        assert "plan_error" not in by_kind[kind]
    # the saving shown is the plan's own: the reclaim command run as a user would run it
    import shlex

    argv = shlex.split(by_kind["large_result"]["reclaim"])[1:] + ["--dry-run", "--json", "--db", str(catalog)]
    plan = json.loads(txdb(*argv, ok=True).output)
    assert by_kind["large_result"]["plan_saves"] == sum(s["tokens_before"] - s["tokens_after"]
                                                        for s in plan["sessions"]) > 0
    # dry runs: nothing written beside the session
    conn = sqlite3.connect(catalog)
    (path,) = conn.execute("SELECT path FROM files WHERE session_id = 's-waste'").fetchone()
    from pathlib import Path

    assert sorted(p.name for p in Path(path).parent.iterdir()) == ["s-waste.jsonl"]


def test_reports_by_project_and_kind_and_errors(catalog):
    by_project = json.loads(txdb("waste", "--by", "project", "--db", catalog, "--json", ok=True).output)
    assert {r["project"] for r in by_project} == {"-app"}
    total = sum(r["usd"] for r in by_project)
    by_kind = json.loads(txdb("waste", "--by", "kind", "--db", catalog, "--json", ok=True).output)
    assert sum(r["usd"] for r in by_kind) == pytest.approx(total)
    out = txdb("waste", "--db", catalog, "--table", ok=True).output
    assert out.splitlines()[-1].startswith("Total: $")
    r = txdb("waste", "--plan", "--db", catalog)
    assert r.exit_code == 2 and "--plan takes a SESSION" in r.output
    r = txdb("waste", "nope-none", "--db", catalog)
    assert r.exit_code == 1 and r.output.startswith("Error: ")
    # a backup beside the session is not the session: one error line, not every session's rows
    conn = sqlite3.connect(catalog)
    (path,) = conn.execute("SELECT path FROM files WHERE session_id = 's-waste'").fetchone()
    conn.close()
    import shutil

    shutil.copyfile(path, path + ".bak")
    r = txdb("waste", path + ".bak", "--db", catalog)
    assert r.exit_code == 1 and r.output.startswith("Error: ") and "not a catalogued session" in r.output


def test_a_hostile_file_name_cannot_reach_the_reclaim_command(tmp_path):
    """The commands name sessions by file_id: a session id taken from a file
    name with quotes and a shell substitution never enters them."""
    root = tmp_path / "projects"
    _session(root)
    evil = root / "-app" / "x' or 1=1 or '$(touch pwned)\".jsonl"
    (root / "-app" / "s-waste.jsonl").rename(evil)
    db = tmp_path / "c.db"
    txdb("refresh", "--root", root, "--db", db, ok=True)
    rows = json.loads(txdb("waste", "--db", db, "--json", ok=True).output)
    assert rows
    for r in rows:
        assert "'" not in r["reclaim"].split("--where", 1)[1].replace("''tool_result''", "").replace(
            "'tool_result'", "") and "$(" not in r["reclaim"]


def test_a_txdb_folder_in_the_current_folder_is_never_imported_by_the_plans(catalog, tmp_path, monkeypatch):
    """The plans run txdb in a process of their own: from a folder holding
    a folder named txdb (a clone's parent, a hostile checkout), that folder
    is not what runs."""
    here = tmp_path / "here"
    (here / "txdb" / "cli").mkdir(parents=True)
    marker = tmp_path / "imported"
    (here / "txdb" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (here / "txdb" / "cli" / "__init__.py").write_text("")
    monkeypatch.chdir(here)
    rows = json.loads(txdb("waste", "s-waste", "--plan", "--db", catalog, "--json", ok=True).output)
    assert not marker.exists()
    assert all("plan_error" not in r for r in rows), rows
    assert any(r["plan_saves"] for r in rows)


def test_a_failed_plan_is_named_under_the_table(catalog, tmp_path, monkeypatch):
    """A plan that fails (here: its process finds a broken txdb first on
    PYTHONPATH) leaves its row's plan_saves empty and says why."""
    broken = tmp_path / "broken"
    (broken / "txdb").mkdir(parents=True)
    (broken / "txdb" / "__init__.py").write_text("raise SystemExit('Error: a broken install')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken))
    out = txdb("waste", "s-waste", "--plan", "--db", catalog, "--table", ok=True).output
    assert out.count("failed: Error: a broken install") == 4, out
    assert "The plan of `txdb persist-tools --where" in out, out


def _waste(db, *args):
    return json.loads(txdb("waste", "--db", db, "--json", "--limit", "1000", *args, ok=True).output)


def _by_kind(db):
    return {r["kind"]: (r["items"] if r["kind"] == "cache_rebuild" else None, pytest.approx(r["usd"], abs=1e-6))
            for r in _waste(db, "--by", "kind")}


def _per_session(db):
    out: dict = {}
    for r in _waste(db):
        out[r["session_id"]] = out.get(r["session_id"], 0) + r["usd"]
    return out


def test_a_fork_or_a_copy_adds_no_waste_dollars_for_the_turns_another_file_holds(tmp_path):
    """An API message counts once, in the file that owns it (as cost counts
    it): a fork and a copy of a session repeat its turns and paid for none,
    so the waste in dollars per kind, project and in all is the session's
    alone; the copy's own new turn is its own; and when the session's
    archive is pruned, its turns and their waste pass to the copy."""
    root = tmp_path / "projects"
    _session(root)
    db = tmp_path / "c.db"
    txdb("refresh", "--root", root, "--db", db, ok=True)
    kinds, total = _by_kind(db), sum(r["usd"] for r in _waste(db, "--by", "kind"))
    assert kinds["cache_rebuild"][0] == 1 and total > 0
    txdb("fork", "s-waste", "--fork-title", "lean copy", "--db", db, ok=True)
    forks = [p for p in (root / "-app").glob("*.jsonl") if p.name != "s-waste.jsonl"]
    assert len(forks) == 1
    fork_id = forks[0].stem
    copy = root / "-other" / "s-waste.jsonl"  # as restore --to lays a copy out: the same lines
    copy.parent.mkdir()
    copy.write_bytes((root / "-app" / "s-waste.jsonl").read_bytes())
    txdb("refresh", "--root", root, "--db", db, ok=True)
    assert _by_kind(db) == kinds
    assert sum(r["usd"] for r in _waste(db, "--by", "project")) == pytest.approx(total, abs=1e-6)
    sessions = _per_session(db)
    assert sessions.get(fork_id, 0) == 0 and sessions["s-waste"] == pytest.approx(total, abs=1e-6)
    costs = {r["session"]: r["cost_usd"] for r in json.loads(
        txdb("cost", "--by", "session", "--db", db, "--json", ok=True).output)["rows"]}
    assert costs.get(fork_id, 0) == 0  # cost counts it so too
    conn = sqlite3.connect(db)
    rebuilds = conn.execute("SELECT file_id FROM waste_items WHERE kind = 'cache_rebuild'").fetchall()
    assert len(rebuilds) == 1  # listed once, in the file its turn counts in

    # the fork's own turn, 10 minutes on: it re-sends the fork's items, and that turn is the fork's
    last = [o for o in map(json.loads, forks[0].read_bytes().splitlines()) if o.get("type") == "assistant"][-1]
    append(forks[0], assistant("and one more", last["uuid"], session=fork_id, msg_id="msg_fork1",
                               timestamp="2026-11-01T10:40:00.000Z", requestId="req_fork1",
                               model="claude-sonnet-4-5",
                               usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 60000,
                                      "cache_creation_input_tokens": 100}))
    txdb("refresh", "--root", root, "--db", db, ok=True)
    (read_p,) = conn.execute("SELECT cache_read_mtok FROM prices WHERE model = 'claude-sonnet-4-5' "
                             "AND above_tokens = 0 ORDER BY valid_from DESC").fetchone()
    own = conn.execute("SELECT w.kind, w.tokens, w.resent_turns, w.paid_turns, w.usd FROM waste_items w JOIN files f "
                       "ON f.id = w.file_id WHERE f.path = ?", (str(forks[0]),)).fetchall()
    assert own and all(paid == 1 and resent > paid for kind, _, resent, paid, _ in own if kind != "cache_rebuild")
    fork_usd = sum(usd for *_, usd in own)
    assert fork_usd == pytest.approx(sum(tok * read_p / 1e6 for kind, tok, *_ in own if kind != "cache_rebuild"),
                                     rel=1e-4)
    assert _per_session(db)["s-waste"] == pytest.approx(total, abs=1e-6)
    assert sum(r["usd"] for r in _waste(db, "--by", "kind")) == pytest.approx(total + fork_usd, abs=1e-6)

    # the session's file gone and its archive pruned: its turns (and their waste) are the copy's now
    (root / "-app" / "s-waste.jsonl").unlink()
    txdb("refresh", "--root", root, "--db", db, ok=True)
    txdb("prune", "--all-gone", "--yes", "--db", db, ok=True)
    rows = _waste(db, "--by", "project")
    assert sum(r["usd"] for r in rows if r["project"] == "-other") == pytest.approx(total, abs=1e-6)
    assert sum(r["usd"] for r in rows) == pytest.approx(total + fork_usd, abs=1e-6)
    assert conn.execute("SELECT count(*) FROM waste_items WHERE kind = 'cache_rebuild'").fetchone() == (1,)
    conn.close()
