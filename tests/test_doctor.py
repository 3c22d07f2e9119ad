"""`txdb doctor`: the retention in effect and the file that sets it, the
sessions Claude Code's next sweeps delete (by mtime, as it decides) and
whether the catalog holds each whole, files not catalogued or stale, the
hook, the price data's date."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import copy_fixture_sessions, run
from txdb.catalog import cost, db, doctor
from txdb.catalog.ingest.store import refresh

DAY = 86400
NOW = time.time()


@pytest.fixture
def box(tmp_path) -> dict:
    cfg = tmp_path / "claude"
    copy_fixture_sessions(cfg / "projects")
    cwd = tmp_path / "proj"
    (cwd / ".claude").mkdir(parents=True)
    return {"cfg": cfg, "cwd": cwd, "managed": tmp_path / "managed-settings.json", "db": tmp_path / "c.db"}


def settings(path: Path, **values) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))


def retention(box):
    return doctor.retention(box["cfg"], box["cwd"], box["managed"], now=NOW)


def test_retention_is_the_default_then_the_setting_of_highest_precedence(box):
    r = retention(box)
    assert (r.days, r.source, r.scope, r.found) == (30, "default", "default", [])
    settings(box["cfg"] / "settings.json", cleanupPeriodDays=90, theme="dark")
    r = retention(box)
    assert (r.days, r.source, r.scope) == (90, str(box["cfg"] / "settings.json"), "user")
    assert r.cutoff == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - 90 * DAY))
    settings(box["cwd"] / ".claude" / "settings.json", cleanupPeriodDays=60)
    settings(box["cwd"] / ".claude" / "settings.local.json", cleanupPeriodDays=45)
    r = retention(box)
    assert (r.days, r.scope) == (45, "local")
    assert [(s.scope, s.value, s.used) for s in r.found] == [("local", 45, True), ("project", 60, False),
                                                             ("user", 90, False)]
    settings(box["managed"], cleanupPeriodDays=7)
    assert (retention(box).days, retention(box).scope) == (7, "managed")


@pytest.mark.parametrize("bad", [0, -3, 2.5, "30", True, None])
def test_a_value_claude_code_refuses_is_reported_and_not_used(box, bad):
    settings(box["cfg"] / "settings.json", cleanupPeriodDays=60)
    settings(box["cwd"] / ".claude" / "settings.json", cleanupPeriodDays=bad)
    r = retention(box)
    assert (r.days, r.scope) == (60, "user")
    [refused] = [s for s in r.found if s.scope == "project"]
    assert refused.value == bad and not refused.used and "refuses" in refused.problem


def test_a_settings_file_that_is_not_json_or_not_a_file_is_named(box):
    (box["cfg"] / "settings.json").write_text("{not json")
    os.mkfifo(box["cwd"] / ".claude" / "settings.json")
    r = retention(box)
    assert r.days == 30
    assert {(s.scope, s.problem) for s in r.found} == {("user", "not valid JSON"),
                                                       ("project", "a FIFO, not a regular file")}


def _age(path: Path, days: float) -> None:
    t = NOW - days * DAY
    os.utime(path, (t, t))


def test_due_sessions_by_mtime_and_whether_the_catalog_holds_them_whole(box):
    projects = box["cfg"] / "projects"
    sessions = sorted(p for p in projects.glob("*/*.jsonl") if not p.name.startswith("agent-"))
    old, soon, fresh, changed = sessions[0], sessions[1], sessions[2], sessions[3]
    for p in sessions:
        _age(p, 1)
    _age(old, 31)  # past the 30 days: the next start deletes it
    _age(soon, 27)  # in 3 days
    _age(changed, 29.5)
    conn = db.connect(box["db"])
    refresh(conn, [projects])
    with open(changed, "ab") as fh:  # grew after the refresh: the catalog lacks its last line
        fh.write(b'{"type":"summary","summary":"late","leafUuid":"x"}\n')
    _age(changed, 29.5)
    late = projects / "-late-project" / "99999999-0000-0000-0000-000000000000.jsonl"
    late.parent.mkdir()
    late.write_bytes(soon.read_bytes())
    _age(late, 40)  # never catalogued, due now

    r = doctor.doctor(conn, box["cfg"], [projects], box["cwd"], within_days=7, managed=box["managed"], now=NOW)
    due = {Path(d.path): d for d in r.due}
    assert set(due) == {old, soon, changed, late}
    assert fresh not in due
    assert due[old].deleted_in_days == 0 and due[old].whole and due[old].not_whole == []
    assert due[soon].deleted_in_days == pytest.approx(3, abs=0.01) and due[soon].whole
    assert not due[changed].whole and due[changed].not_whole == [str(changed)]
    assert not due[late].whole and due[late].session_id == late.stem
    assert [d.path for d in r.due][2:] == [str(changed), str(soon)]  # soonest first
    assert r.not_catalogued == [str(late)] and r.stale == [str(changed)]
    assert r.session_files == len(list(projects.rglob("*.jsonl")))

    # with a longer setting, nothing is due within a week
    settings(box["cfg"] / "settings.json", cleanupPeriodDays=365)
    r = doctor.doctor(conn, box["cfg"], [projects], box["cwd"], within_days=7, managed=box["managed"], now=NOW)
    assert r.due == [] and r.retention.days == 365


def test_a_session_is_whole_only_with_its_subagents(box):
    projects = box["cfg"] / "projects"
    agent = next(projects.glob("*/*/subagents/agent-*.jsonl"), None)
    if agent is None:
        pytest.skip("no subagent transcript in the fixture sessions")
    session = agent.parent.parent.with_suffix(".jsonl")
    conn = db.connect(box["db"])
    refresh(conn, [projects])
    _age(session, 40)  # its mtime moved since the refresh, its bytes did not: hashed, whole
    r = doctor.doctor(conn, box["cfg"], [projects], box["cwd"], managed=box["managed"], now=NOW)
    [d] = [d for d in r.due if d.path == str(session)]
    assert d.whole and d.files > 1
    assert str(session) in r.stale  # out of date for refresh all the same (its mtime)
    with open(agent, "ab") as fh:
        fh.write(b'{"type":"summary","summary":"late","leafUuid":"x"}\n')
    r = doctor.doctor(conn, box["cfg"], [projects], box["cwd"], managed=box["managed"], now=NOW)
    [d] = [d for d in r.due if d.path == str(session)]
    assert not d.whole and d.not_whole == [str(agent)]


def test_the_hook_is_found_in_plugin_settings_or_a_hook_command(box, monkeypatch, tmp_path):
    cfg, cwd = box["cfg"], box["cwd"]
    h = doctor.hook_status(cfg, cwd, box["managed"])
    assert (h.installed, h.how) == (False, [])
    settings(cfg / "settings.json", enabledPlugins={"txdb@txdb": True})
    settings(cwd / ".claude" / "settings.json",
             hooks={"Stop": [{"hooks": [{"type": "command", "command": "txdb-hook"}]}]})
    bindir = tmp_path / "bin"
    bindir.mkdir()
    hook = bindir / "txdb-hook"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    h = doctor.hook_status(cfg, cwd, box["managed"])
    assert h.installed and h.command_on_path == str(hook)
    assert h.how == [f"a hook runs txdb-hook in {cwd / '.claude' / 'settings.json'}",
                     f"plugin txdb@txdb enabled in {cfg / 'settings.json'}"]
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert not doctor.hook_status(cfg, cwd, box["managed"]).installed  # enabled, but it cannot run


def test_the_cli_reports_it_and_json_carries_it_all(box, monkeypatch):
    projects = box["cfg"] / "projects"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(box["cfg"]))
    (box["cfg"] / "history.jsonl").write_text(json.dumps(
        {"display": "hi", "pastedContents": {}, "timestamp": 1700000000000, "project": "/x",
         "sessionId": "11111111-2222-3333-4444-555555555555"}) + "\n")
    settings(box["cwd"] / ".claude" / "settings.local.json", cleanupPeriodDays=14)
    old = sorted(projects.glob("*/*.jsonl"))[0]
    _age(old, 20)
    run("refresh", "--db", box["db"], ok=True)
    r = run("doctor", "--db", box["db"], "--cwd", box["cwd"], "--json", ok=True)
    got = json.loads(r.output)
    assert got["retention"]["days"] == 14 and got["retention"]["scope"] == "local"
    assert any(d["path"] == str(old) and d["whole"] and d["deleted_in_days"] == 0 for d in got["due"])
    assert got["prices"]["data_date"] == cost.data_date()
    assert got["history"] == {"prompts": 1, "sessions": 1, "gone_before_txdb": 1}
    r = run("doctor", "--db", box["db"], "--cwd", box["cwd"], ok=True)
    assert f"cleanupPeriodDays = 14 ({box['cwd'] / '.claude' / 'settings.local.json'})" in r.output
    assert "held whole by the catalog:" in r.output and "1 gone before txdb" in r.output
    assert f"{old.stem} {old.parent.name} at Claude Code's next start: held whole" in r.output
    assert f"data of {cost.data_date()}" in r.output

    r = run("doctor", "--db", box["db"].with_name("none.db"))
    assert r.exit_code == 1 and r.output.startswith("Error:")
