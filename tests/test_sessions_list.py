"""`txdb sessions`: how close each session is to its own window, figures as
every table prints them, a cost that includes its subagents, URLs that each
name one session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sessions import assistant, user, write
from txdb.cli import cli

SONNET = "claude-sonnet-4-6"


def usage(context: int) -> dict:
    return {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": context - 10}


def session(path: Path, sid: str, contexts: list[int], model: str = SONNET) -> Path:
    objs, parent = [], None
    for i, c in enumerate(contexts):
        u = user(f"prompt {i}", parent, session=sid)
        a = assistant(f"answer {i}", u["uuid"], session=sid, usage=usage(c), model=model)
        objs += [u, a]
        parent = a["uuid"]
    return write(path, objs)


@pytest.fixture
def projects(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.delenv("CLAUDE_CODE_SESSION_ID", raising=False)
    return tmp_path / "claude" / "projects"


def run(*args) -> str:
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


A = "aaaaaaaa-0000-4000-8000-000000000001"
B = "bbbbbbbb-0000-4000-8000-000000000002"
C = "cccccccc-0000-4000-8000-000000000003"


def test_sessions_shows_each_against_its_own_window_with_separators(projects):
    # A: recorded 250k once, now 40k: a 1M window. B: 170k of 200k: near. C: 1.2M... of 1M: over.
    session(projects / "-p" / f"{A}.jsonl", A, [100_000, 250_000, 40_000])
    session(projects / "-p" / f"{B}.jsonl", B, [120_000, 170_000])
    session(projects / "-p" / f"{C}.jsonl", C, [900_000, 1_010_000], model="claude-opus-4-6[1m]")
    run("refresh")
    rows = {r["session_id"]: r for r in json.loads(run("sessions", "--json"))}
    assert (rows[A]["window_tokens"], rows[A]["pct_of_window"], rows[A]["status"]) == (1_000_000, 4.0, "ok")
    assert (rows[B]["window_tokens"], rows[B]["pct_of_window"], rows[B]["status"]) == (200_000, 85.0, "near")
    assert (rows[C]["window_tokens"], rows[C]["status"]) == (1_000_000, "over")
    table = {line.split()[0]: line for line in run("sessions", "--table").splitlines()[2:]}
    assert "4% of 1M" in table[A] and " ok" in table[A] and "40,000" in table[A]
    assert "85% of 200k" in table[B] and " near" in table[B] and "170,000" in table[B]
    assert "101% of 1M" in table[C] and " over" in table[C] and "1,010,000" in table[C]
    assert "1010000" not in table[C]


def test_a_sessions_cost_includes_its_subagents_as_cost_by_session_does(projects):
    main = session(projects / "-p" / f"{A}.jsonl", A, [20_000, 30_000])
    sub = main.parent / A / "subagents" / "agent-a1.jsonl"
    objs, parent = [], None
    for i in range(3):
        u = user(f"task {i}", parent, session=A, agentId="a1", isSidechain=True)
        a = assistant(f"done {i}", u["uuid"], session=A, usage=usage(50_000), model=SONNET,
                      agentId="a1", isSidechain=True)
        objs += [u, a]
        parent = a["uuid"]
    write(sub, objs)
    session(projects / "-p" / f"{B}.jsonl", B, [10_000])
    run("refresh")
    listed = {r["session_id"]: r["cost_usd"] for r in json.loads(run("sessions", "--json"))}
    by_session = {r["session"]: r["cost_usd"] for r in json.loads(run("cost", "--by", "session", "--json"))["rows"]}
    assert listed == by_session
    own = {r["session_id"]: r["cost_usd"] for r in json.loads(run("sessions", "--subagents", "--json"))
           if r["session_id"] == "agent-a1"}
    assert own["agent-a1"] > 0 and listed[A] > own["agent-a1"]   # the subagent's cost is in its session's


def test_project_takes_wildcards_literally(projects):
    """--project is a substring of the project folder's name, its _ and %
    taken as themselves (not LIKE's wildcards), --gone's as well."""
    session(projects / "-work-my_app" / f"{A}.jsonl", A, [10_000])
    session(projects / "-work-myxapp" / f"{B}.jsonl", B, [10_000])
    session(projects / "-work-100%" / f"{C}.jsonl", C, [10_000])
    run("refresh")

    def ids(*args):
        return sorted(r["session_id"] for r in json.loads(run("sessions", "--json", *args)))
    assert ids("--project", "_") == [A]
    assert ids("--project", "%") == [C]
    assert ids("--project", "MY_APP") == [A]  # ASCII case ignored, as before
    assert ids("--project", "\\") == []
    assert ids("--project", "app") == [A, B]
    for sid in (A, B):
        next(projects.glob(f"*/{sid}.jsonl")).unlink()
    run("refresh")
    assert ids("--gone", "--project", "_") == [A]
    assert ids("--gone", "--project", "app") == [A, B]



def test_a_gone_session_is_marked_gone_in_the_listing(projects):
    kept = session(projects / "-work-app" / "a0000000-0000-4000-8000-000000000001.jsonl", "a0000000-0000-4000-8000-000000000001", [1000])
    victim = session(projects / "-work-app" / "b0000000-0000-4000-8000-000000000002.jsonl", "b0000000-0000-4000-8000-000000000002", [2000])
    runner = CliRunner()
    assert runner.invoke(cli, ["refresh"]).exit_code == 0
    victim.unlink()
    assert runner.invoke(cli, ["refresh"]).exit_code == 0
    rows = {r["session_id"]: r for r in json.loads(runner.invoke(cli, ["sessions", "--json"]).output)}
    assert (rows[victim.stem]["gone"], rows[kept.stem]["gone"]) == (1, 0)
    table = runner.invoke(cli, ["sessions", "--table", "--wide"]).output.splitlines()
    assert [line.split()[0][:8] for line in table if " gone " in line] == ["b0000000"], table
