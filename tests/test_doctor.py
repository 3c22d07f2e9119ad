"""`txdb doctor`: the retention in effect and the file that sets it, the
sessions Claude Code's next sweeps delete (by mtime, as it decides) and
whether the catalog holds each whole, files not catalogued or stale, the
hook, the price data's date."""

from __future__ import annotations

import json
import os
import shutil
import stat
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
    # a schema error while a file sets cleanupPeriodDays: Claude Code skips the cleanup altogether
    assert "refuses" in r.skipped


def test_a_settings_file_that_is_not_json_or_not_a_file_is_named(box):
    (box["cfg"] / "settings.json").write_text("{not json")
    os.mkfifo(box["cwd"] / ".claude" / "settings.json")
    r = retention(box)
    assert r.days == 30
    assert {(s.scope, s.problem) for s in r.found} == {("user", "not valid JSON"),
                                                       ("project", "a FIFO, not a regular file")}
    assert "cannot be read or parsed" in r.skipped  # and Claude Code skips the cleanup


def _age(path: Path, days: float) -> None:
    t = NOW - days * DAY
    os.utime(path, (t, t))


def test_due_sessions_by_mtime_and_whether_the_catalog_holds_them_whole(box):
    projects = box["cfg"] / "projects"
    # not an empty one with no folder: Claude Code's cleanup keeps that (desktop_kept)
    sessions = sorted(p for p in projects.glob("*/*.jsonl") if not p.name.startswith("agent-") and p.stat().st_size)
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
    assert got["history"] == {"prompts": 1, "sessions": 1, "without_session": 0, "gone_before_txdb": 1}
    r = run("doctor", "--db", box["db"], "--cwd", box["cwd"], ok=True)
    assert f"cleanupPeriodDays = 14 ({box['cwd'] / '.claude' / 'settings.local.json'})" in r.output
    assert "held whole by the catalog:" in r.output and "1 gone before txdb" in r.output
    assert f"{old.stem} {old.parent.name} at Claude Code's next start: held whole" in r.output
    assert f"data of {cost.data_date()}" in r.output


def _refresh(box) -> None:
    run("refresh", "--db", box["db"], "--root", box["cfg"] / "projects", ok=True)


def _cli(box, monkeypatch, *args, ok=True):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(box["cfg"]))
    if not box["db"].exists():
        _refresh(box)
    return run("doctor", "--db", box["db"], "--cwd", box["cwd"], *args, ok=ok)


def _sessions(box) -> list[Path]:
    """The session files beside the projects' sessions, but an empty one with no folder (Claude Code keeps it)."""
    return sorted(p for p in (box["cfg"] / "projects").glob("*/*.jsonl") if not p.name.startswith("agent-")
                  and p.stat().st_size)


SOME = "-Users-dain-workspace-claude-code-log-sample/4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl"  # a summary line


def test_a_cutoff_before_year_one_leaves_nothing_due(box, monkeypatch):
    (box["cfg"] / "settings.json").write_text('{"cleanupPeriodDays": 999999}')
    _refresh(box)
    _age(_sessions(box)[0], 4000)
    r = _cli(box, monkeypatch, "--within", "1e9")
    assert "cleanupPeriodDays = 999999" in r.output and "the cutoff falls before the year 1" in r.output
    assert "Due within 1e+09 days: 0 sessions" in r.output
    got = json.loads(_cli(box, monkeypatch, "--json").output)
    assert got["retention"]["cutoff"] is None and got["retention"]["days"] == 999999 and got["due"] == []


def test_settings_nested_deeply_are_named_never_raised(box, monkeypatch):
    user = box["cfg"] / "settings.json"
    local = box["cwd"] / ".claude" / "settings.local.json"  # a cloned repo's, read with --cwd
    user.write_text('{"hooks":' + "[" * 300 + "]" * 300 + "}")
    local.write_text('{"cleanupPeriodDays":' + "[" * 1000 + "]" * 1000 + "}")
    for args in ((), ("--json",)):
        r = _cli(box, monkeypatch, *args)
        assert "a list, not a whole number of days" in r.output
    assert "Hook: not installed" in _cli(box, monkeypatch).output
    local.write_text('{"cleanupPeriodDays":' + "[" * 5000 + "]" * 5000 + "}")  # deeper than Python's parsers go
    for args in ((), ("--json",)):
        r = _cli(box, monkeypatch, *args)
        assert "nested too deeply for txdb doctor to read" in r.output


@pytest.mark.parametrize("within", ["nan", "inf", "-inf", "-1"])
def test_within_is_a_finite_number_of_days(box, monkeypatch, within):
    r = _cli(box, monkeypatch, "--within", within, ok=False)
    assert r.exit_code == 2 and "Error: Invalid value for '--within'" in r.output


def test_subagent_transcripts_without_their_session_file_are_due_on_their_own(box, monkeypatch):
    projects = box["cfg"] / "projects"
    old_style = projects / "-Users-dain-workspace-coderabbit-review-helper" / "agent-1d78a5e5.jsonl"
    parent = "8a69e93c-e842-471d-a053-5c316757e5e9"  # its lines' sessionId; no such session file
    layout = next(projects.glob("-experiments-worktrees/*/subagents/agent-*.jsonl"))
    sid = layout.parent.parent.name
    _refresh(box)
    layout.parent.parent.with_suffix(".jsonl").unlink()  # Claude Code swept the session file, not the subagent's
    _age(old_style, 40)
    _age(layout, 29)
    due = {d["session_id"]: d for d in json.loads(_cli(box, monkeypatch, "--json").output)["due"]}
    assert due[parent]["lone"] and due[parent]["path"] == str(old_style) and due[parent]["files"] == 1
    assert due[parent]["whole"] and due[parent]["deleted_in_days"] == 0
    assert due[sid]["lone"] and due[sid]["path"] == str(layout) and due[sid]["whole"]
    # the command's now, not the module's NOW (aged from it): a long run's minutes apart
    assert due[sid]["deleted_in_days"] == pytest.approx(1 - (time.time() - NOW) / DAY, abs=0.01)
    out = _cli(box, monkeypatch).output
    assert f"{parent} -Users-dain-workspace-coderabbit-review-helper (subagent transcript without the session " \
           "file) at Claude Code's next start: held whole" in out

    # its session file there: the old release's transcript goes with it, as the catalog's parent_session_id says
    session = old_style.with_name(parent + ".jsonl")
    session.write_bytes((projects / SOME).read_bytes())
    _age(session, 40)
    due = {d["session_id"]: d for d in json.loads(_cli(box, monkeypatch, "--json").output)["due"]}
    assert not due[parent]["lone"] and due[parent]["path"] == str(session) and due[parent]["files"] == 2
    assert due[parent]["not_whole"] == [str(session)]  # the session file is not catalogued, its subagent's is


NAMED = "8a69e93c-e842-471d-a053-5c316757e5e9"  # the session the fixture's older-release agent file names


def _project(box, tmp_path) -> tuple[Path, Path, Path, Path, Path]:
    """A projects root of one folder: a session file with a subagent
    transcript in its folder, and an older release's agent file beside the
    session file its lines name (all fresh)."""
    src = box["cfg"] / "projects"
    layout = next(src.glob("-experiments-worktrees/*/subagents/agent-*.jsonl"))
    proj = tmp_path / "roots" / "-p"
    agent = proj / layout.relative_to(layout.parent.parent.parent)
    agent.parent.mkdir(parents=True)
    shutil.copyfile(layout, agent)
    session = proj / (layout.parent.parent.name + ".jsonl")
    shutil.copyfile(layout.parent.parent.with_suffix(".jsonl"), session)
    beside = proj / "agent-1d78a5e5.jsonl"
    shutil.copyfile(src / "-Users-dain-workspace-coderabbit-review-helper" / beside.name, beside)
    named = proj / f"{NAMED}.jsonl"
    shutil.copyfile(src / SOME, named)
    for p in (agent, session, beside, named):
        _age(p, 1)
    return proj.parent, session, agent, named, beside


def _due(box, root, within=7) -> dict[str, doctor.DueSession]:
    conn = db.connect(box["db"])
    refresh(conn, [root])
    r = doctor.doctor(conn, box["cfg"], [root], box["cwd"], within_days=within, managed=box["managed"], now=NOW)
    return {d.path: d for d in r.due}


def test_a_session_folder_goes_with_its_session_file_and_an_agent_file_beside_by_its_own_mtime(box, tmp_path,
                                                                                             monkeypatch):
    """As Claude Code's cleanup does: a subagent transcript in a session's
    folder goes with the session file (its own mtime does not count), an
    older release's agent-*.jsonl beside the sessions by its own mtime."""
    root, session, agent, named, beside = _project(box, tmp_path)
    _age(session, 40)  # goes now, and its fresh subagent transcript with it
    _age(beside, 40)  # goes now, though the session file it names is fresh
    due = _due(box, root)
    assert set(due) == {str(session), str(beside)}
    assert (due[str(session)].files, due[str(session)].deleted_in_days) == (2, 0)
    assert (due[str(beside)].files, due[str(beside)].deleted_in_days, due[str(beside)].lone) == (1, 0, False)
    assert due[str(beside)].session_id == NAMED
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(box["cfg"]))
    out = run("doctor", "--db", box["db"], "--cwd", box["cwd"], "--root", root, ok=True).output
    assert f"{NAMED} -p (an older release's subagent transcript beside the session file, by its own mtime) at " \
           "Claude Code's next start" in out, out

    _age(session, 1)
    _age(agent, 40)  # its session file is fresh: it stays
    _age(beside, 1)
    _age(named, 40)  # goes alone: the fresh agent file beside it stays
    due = _due(box, root)
    assert set(due) == {str(named)} and due[str(named)].files == 1


def _two_lone_agents(box, tmp_path):
    """A session's file deleted, its two subagent transcripts left: one 40 days old, one 20."""
    root, session, agent, _named, _beside = _project(box, tmp_path)
    second = agent.with_name("agent-second.jsonl")
    shutil.copyfile(agent, second)
    session.unlink()
    _age(agent, 40)
    _age(second, 20)
    return root, agent, second


def test_subagent_transcripts_without_their_session_file_go_one_by_one(box, tmp_path):
    root, agent, second = _two_lone_agents(box, tmp_path)
    due = _due(box, root)
    assert set(due) == {str(agent)} and due[str(agent)].files == 1 and due[str(agent)].lone
    due = _due(box, root, within=15)
    assert due[str(second)].deleted_in_days == pytest.approx(10, abs=0.01) and due[str(second)].files == 1


def test_the_sweep_rule_file_by_file(tmp_path):
    """doctor.sweep_mtime_ns: the mtime Claude Code's cleanup judges each
    file by; doctor.swept: strictly older than the cutoff, in whole ms."""
    proj = tmp_path / "-p"
    sid = "11111111-2222-3333-4444-555555555555"

    def put(rel: str, days: float) -> Path:
        p = proj / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{}\n")
        _age(p, days)
        return p

    session = put(f"{sid}.jsonl", 10)
    ns = session.stat().st_mtime_ns
    files = {rel: put(rel, days) for rel, days in [
        (f"{sid}/subagents/agent-a.jsonl", 40), (f"{sid}/subagents/agent-a.meta.json", 1),
        (f"{sid}/tool-results/old.txt", 40), (f"{sid}/tool-results/new.txt", 1), (f"{sid}/persisted/p.txt", 40),
        ("agent-b.jsonl", 3)]}
    got = {rel: doctor.sweep_mtime_ns(p, proj) for rel, p in files.items()}
    assert got == {f"{sid}/subagents/agent-a.jsonl": ns, f"{sid}/subagents/agent-a.meta.json": ns,
                   f"{sid}/tool-results/old.txt": files[f"{sid}/tool-results/old.txt"].stat().st_mtime_ns,
                   f"{sid}/tool-results/new.txt": ns, f"{sid}/persisted/p.txt": ns,
                   "agent-b.jsonl": files["agent-b.jsonl"].stat().st_mtime_ns}
    assert doctor.sweep_mtime_ns(session, proj) == ns
    session.unlink()  # no session file: each by its own mtime; txdb's own persisted/ never
    assert doctor.sweep_mtime_ns(files[f"{sid}/subagents/agent-a.jsonl"], proj) == \
        files[f"{sid}/subagents/agent-a.jsonl"].stat().st_mtime_ns
    assert doctor.sweep_mtime_ns(files[f"{sid}/persisted/p.txt"], proj) is None
    assert doctor.sweep_mtime_ns(session, proj) is None
    now = 1_800_000_000.0
    cutoff_ns = int(now * 1000 - 30 * DAY * 1000) * 1_000_000
    assert not doctor.swept(cutoff_ns, 30, now) and not doctor.swept(cutoff_ns + 999_999, 30, now)
    assert doctor.swept(cutoff_ns - 1, 30, now)


@pytest.mark.parametrize("named", ["/tmp/elsewhere/PWNED", "../../x", "not-a-uuid"])
def test_an_agent_file_naming_no_session_id_is_due_under_its_own_name(box, monkeypatch, named):
    """The sessionId an older release's agent file names builds a path only
    when it is a session id: anything else leaves the file a group of its own."""
    projects = box["cfg"] / "projects"
    src = projects / "-Users-dain-workspace-coderabbit-review-helper" / "agent-1d78a5e5.jsonl"
    evil = src.with_name("agent-evil.jsonl")
    evil.write_bytes(src.read_bytes().replace(b"8a69e93c-e842-471d-a053-5c316757e5e9", named.encode()))
    _refresh(box)
    _age(evil, 40)
    r = _cli(box, monkeypatch, "--json")
    assert r.exit_code == 0, r.output
    due = {d["session_id"]: d for d in json.loads(r.output)["due"]}
    assert due["agent-evil"]["lone"] and due["agent-evil"]["path"] == str(evil)
    assert _cli(box, monkeypatch).exit_code == 0


def _settings_case(box, case):
    user, local = box["cfg"] / "settings.json", box["cwd"] / ".claude" / "settings.local.json"
    if case == "not json":
        user.write_text("{not json")
    elif case == "zero":
        local.write_text('{"cleanupPeriodDays": 0}')
    elif case == "refused desktop":
        local.write_text('{"desktopSessionCleanupPeriodDays": -1}')
        user.write_text('{"desktopSessionCleanupPeriodDays": 5}')
    elif case == "empty, recent":
        user.write_text("")
    elif case == "empty, old":
        user.write_text("")
        _age(user, 31)
    elif case == "whitespace":
        user.write_text(" \n")
        _age(user, 1)


@pytest.mark.parametrize("case, skipped", [
    ("not json", "cannot be read or parsed (not valid JSON)"),
    ("zero", "holds a cleanupPeriodDays Claude Code refuses"),
    ("refused desktop", "holds a desktopSessionCleanupPeriodDays Claude Code refuses"),
    ("empty, recent", "is empty and was written within the last 30 days"),
    ("empty, old", None),
    ("whitespace", None),
])
def test_doctor_says_when_claude_code_skips_the_cleanup(box, monkeypatch, case, skipped):
    old = _sessions(box)[0]
    _age(old, 40)
    _settings_case(box, case)
    got = json.loads(_cli(box, monkeypatch, "--json").output)
    if skipped is None:
        assert got["retention"]["skipped"] is None and got["retention"]["found"] == [] and any(d["path"] == str(old) for d in got["due"])
        return
    assert skipped in got["retention"]["skipped"] and got["due"] == []
    out = _cli(box, monkeypatch).output
    assert out.startswith("Retention: cleanup skipped: ") and "Claude Code deletes no transcript" in out
    assert "Due within 7 days: 0 sessions" in out


def test_managed_settings_that_set_the_period_run_the_cleanup_whatever_else(box):
    settings(box["managed"], cleanupPeriodDays=10)
    (box["cfg"] / "settings.json").write_text("{not json")
    r = retention(box)
    assert (r.days, r.scope, r.skipped) == (10, "managed", None)
    settings(box["managed"], cleanupPeriodDays=0)  # refused: as if it set nothing
    r = retention(box)
    assert r.days == 30 and "cannot be read or parsed" in r.skipped
    (box["cfg"] / "settings.json").write_text("{}")
    assert retention(box).skipped is None  # no file but the managed one sets it


@pytest.mark.parametrize("text, days", [("60.0", 60), ("1e2", 100), ("6E1", 60), ("1e400", None), ("60.5", None)])
def test_a_value_is_read_as_javascript_reads_it(box, monkeypatch, text, days):
    (box["cfg"] / "settings.json").write_text('{"cleanupPeriodDays": %s}' % text)
    got = json.loads(_cli(box, monkeypatch, "--json").output)["retention"]
    if days is None:
        assert got["days"] == 30 and "refuses" in got["skipped"]
    else:
        assert (got["days"], got["scope"], got["skipped"]) == (days, "user", None)


def test_when_reads_in_days_or_hours_and_a_file_is_named_once(box, monkeypatch):
    first, second = _sessions(box)[:2]
    _refresh(box)
    _age(first, 29.5)
    _age(second, 29)
    out = _cli(box, monkeypatch, "--within", "1").output
    assert "Due within 1 day: 2 sessions" in out
    assert f"{first.stem} " in out and " in 12 hours: held whole" in out and " in 1 day: held whole" in out
    local = box["cwd"] / ".claude" / "settings.local.json"
    local.write_text('{"cleanupPeriodDays": 0}')
    out = _cli(box, monkeypatch).output
    assert out.splitlines()[0] == (f"Retention: cleanup skipped: {local} holds a cleanupPeriodDays Claude Code "
                                   "refuses; Claude Code deletes no transcript at its next start (once that is "
                                   "fixed, cleanupPeriodDays = 30 (Claude Code default) applies).")


def test_a_file_refresh_cannot_catalogue_makes_its_entry_not_whole(box, tmp_path, monkeypatch):
    """A transcript whose name is not UTF-8 is never catalogued; the cleanup
    deletes it all the same: its entry is not held whole, and it is counted
    among the files not catalogued."""
    sid = "11111111-2222-3333-4444-555555555555"
    sub = tmp_path / "roots" / "-p" / sid / "subagents"  # a lone subagent folder: no <sid>.jsonl
    sub.mkdir(parents=True)
    line = json.dumps({"type": "user", "sessionId": sid, "uuid": "u1", "message": {"role": "user", "content": "hi"}})
    good, odd = sub / "agent-b.jsonl", sub / os.fsdecode(b"agent-\xff\xfe.jsonl")
    for p in (good, odd):
        p.write_text(line + "\n")
        _age(p, 40)
    os.utime(odd, ns=(good.stat().st_mtime_ns,) * 2)  # one entry: they go at the same time
    root = tmp_path / "roots"
    conn = db.connect(box["db"])
    refresh(conn, [root])
    r = doctor.doctor(conn, box["cfg"], [root], box["cwd"], managed=box["managed"], now=NOW)
    shown = str(sub / "agent-\\xff\\xfe.jsonl")
    [d] = r.due
    assert (d.files, d.whole, d.not_whole, d.lone) == (2, False, [shown], True)
    assert r.session_files == 2 and r.not_catalogued == [shown] and r.cannot_catalogue == [shown]
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(box["cfg"]))
    out = run("doctor", "--db", box["db"], "--cwd", box["cwd"], "--root", root, ok=True).output
    assert "NOT held whole (1 of 2 files)" in out
    assert "Session files: 2, 1 not catalogued (1 of them cannot be: a name that is not UTF-8, under Unreadable)" in out
    got = json.loads(run("doctor", "--db", box["db"], "--cwd", box["cwd"], "--root", root, "--json", ok=True).output)
    assert got["due"][0]["not_whole"] == [shown] and got["cannot_catalogue"] == [shown]


@pytest.mark.parametrize("kind", ["fifo", "old fifo", "link to a device"])
def test_a_settings_file_that_is_not_regular_is_unreadable_not_empty(box, tmp_path, kind):
    """Claude Code reads a settings file only if regular (through a link):
    a FIFO or a device cannot be read, whatever its mtime, though its
    st_size is 0; the empty-file rule is a regular file's."""
    user = box["cfg"] / "settings.json"
    if kind == "link to a device":
        dev = tmp_path / "zero"  # as /dev/zero, written now
        try:
            os.mknod(dev, stat.S_IFCHR | 0o600, os.makedev(1, 5))
        except (PermissionError, AttributeError):
            pytest.skip("no device node can be made here")
        os.utime(dev, (NOW - DAY,) * 2)
        user.symlink_to(dev)
    else:
        os.mkfifo(user)
        _age(user, 40 if kind == "old fifo" else 1)
    r = retention(box)
    what = "a character device" if kind == "link to a device" else "a FIFO"
    assert r.skipped.startswith(f"{user} cannot be read or parsed ({what}"), r.skipped
    assert "empty" not in r.skipped


def test_a_value_prints_as_javascript_shows_it(box, monkeypatch):
    (box["cfg"] / "settings.json").write_text('{"cleanupPeriodDays": 1e308}')
    out = _cli(box, monkeypatch).output
    assert "cleanupPeriodDays = 1e+308 (" in out and "0" * 30 not in out
    (box["cfg"] / "settings.json").write_text('{"cleanupPeriodDays": 10000000000000000000000000}')
    (box["cwd"] / ".claude" / "settings.local.json").write_text('{"cleanupPeriodDays": 10}')
    out = _cli(box, monkeypatch).output
    assert f"({box['cfg'] / 'settings.json'} sets 1e+25, overridden)" in out
    (box["cwd"] / ".claude" / "settings.local.json").write_text('{"cleanupPeriodDays": 2.5}')
    assert "(cleanupPeriodDays = 2.5)" in _cli(box, monkeypatch).output


def test_an_integer_of_over_4300_digits_is_read_as_javascript_reads_it(box, monkeypatch):
    """JSON.parse reads it as a number (here infinity); Python's int refuses it."""
    huge = "9" * 4301
    user = box["cfg"] / "settings.json"
    user.write_text('{"cleanupPeriodDays": 60, "someCount": %s}' % huge)
    r = retention(box)
    assert (r.days, r.scope, r.skipped, r.found[0].problem) == (60, "user", None, None)
    user.write_text('{"cleanupPeriodDays": %s}' % huge)
    r = retention(box)
    assert r.days == 30 and "holds a cleanupPeriodDays Claude Code refuses" in r.skipped
    assert "(cleanupPeriodDays = Infinity)" in _cli(box, monkeypatch).output


DESKTOP_SID = "22222222-3333-4444-5555-666666666666"


def _desktop_project(tmp_path, lines: list[dict] | None, folder: bool = False) -> tuple[Path, Path]:
    root = tmp_path / "roots"
    session = root / "-p" / f"{DESKTOP_SID}.jsonl"
    session.parent.mkdir(parents=True, exist_ok=True)
    session.write_text("".join(json.dumps(x) + "\n" for x in lines) if lines else "")
    if folder:
        (root / "-p" / DESKTOP_SID / "subagents").mkdir(parents=True, exist_ok=True)
    _age(session, 40)
    return root, session


def _line(entrypoint: str, **more) -> dict:
    return {"type": "user", "sessionId": DESKTOP_SID, "uuid": "u1", "entrypoint": entrypoint,
            "message": {"role": "user", "content": "hi"}, **more}


def _due_paths(box, root) -> set[str]:
    conn = db.connect(box["db"])
    refresh(conn, [root])
    r = doctor.doctor(conn, box["cfg"], [root], box["cwd"], managed=box["managed"], now=NOW)
    return {d.path for d in r.due}


@pytest.mark.parametrize("entrypoint", ["claude-desktop", "claude-desktop-3p", "local-agent", "local_agent"])
def test_claude_code_keeps_a_desktop_apps_transcript_unless_managed_settings_set_the_period(box, tmp_path,
                                                                                             entrypoint):
    root, session = _desktop_project(tmp_path, [_line(entrypoint)])
    assert _due_paths(box, root) == set()
    settings(box["managed"], cleanupPeriodDays=30)
    assert _due_paths(box, root) == {str(session)}


def test_a_desktop_transcript_is_known_by_its_first_or_last_64_kib(box, tmp_path):
    pad = {"type": "user", "uuid": "p", "message": {"role": "user", "content": "x" * 70000}}
    root, session = _desktop_project(tmp_path, [_line("cli"), pad, _line("claude-desktop")])
    assert _due_paths(box, root) == set()  # the last line names the desktop app
    root, session = _desktop_project(tmp_path, [_line("cli"), pad, _line("cli")])
    assert _due_paths(box, root) == {str(session)}
    root, session = _desktop_project(tmp_path, [_line("claude-desktop"), pad, pad, _line("cli")])
    assert _due_paths(box, root) == set()  # the first line that names one


def test_a_desktop_transcript_goes_when_released_or_older_than_the_desktop_period(box, tmp_path):
    root, session = _desktop_project(tmp_path, [_line("claude-desktop")])
    released = session.with_name(f"{DESKTOP_SID}.desktop-released.json")
    released.write_text('{"reason": "delete"}')
    assert _due_paths(box, root) == {str(session)}
    released.write_text('{"reason": "archive"}')  # written now: kept a while yet
    assert _due_paths(box, root) == set()
    _age(released, 40)
    assert _due_paths(box, root) == {str(session)}
    released.unlink()
    settings(box["cfg"] / "settings.json", desktopSessionCleanupPeriodDays=35)
    assert _due_paths(box, root) == {str(session)}  # older than 35 days
    settings(box["cfg"] / "settings.json", desktopSessionCleanupPeriodDays=45)
    assert _due_paths(box, root) == set()


def test_an_empty_session_file_is_kept_unless_it_has_a_folder(box, tmp_path):
    root, session = _desktop_project(tmp_path, None)
    assert _due_paths(box, root) == set()
    root, session = _desktop_project(tmp_path, None, folder=True)
    assert _due_paths(box, root) == {str(session)}


def test_a_transcript_in_the_projects_root_itself_is_never_due(box, tmp_path):
    root, session = _desktop_project(tmp_path, [_line("cli")])
    top = root / "33333333-4444-5555-6666-777777777777.jsonl"
    shutil.copyfile(session, top)
    _age(top, 40)
    assert _due_paths(box, root) == {str(session)}


def test_due_counts_sessions_and_names_the_deletions_when_more(box, tmp_path, monkeypatch):
    """Two lone subagent transcripts of one session go at two times: one
    session, two deletions (--json lists each deletion)."""
    root, agent, second = _two_lone_agents(box, tmp_path)
    run("refresh", "--db", box["db"], "--root", root, ok=True)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(box["cfg"]))
    args = ("doctor", "--db", box["db"], "--cwd", box["cwd"], "--root", root, "--within", 15)
    out = run(*args, ok=True).output
    assert "Due within 15 days: 1 session (2 deletions), 1 held whole by the catalog:" in out, out
    assert len(json.loads(run(*args, "--json", ok=True).output)["due"]) == 2
    second.unlink()
    out = run(*args, ok=True).output
    assert "Due within 15 days: 1 session, 1 held whole by the catalog:" in out, out


def test_a_symlinked_desktop_released_file_is_not_read(box, tmp_path):
    """Claude Code (2.1.332) opens ``<id>.desktop-released.json`` with
    O_NOFOLLOW (``readFileFdGated``): a link there is read as no file, so
    the desktop transcript stays kept, and doctor says so too."""
    root, session = _desktop_project(tmp_path, [_line("claude-desktop")])
    real = tmp_path / "released-elsewhere.json"
    real.write_text('{"reason": "delete"}')
    released = session.with_name(f"{DESKTOP_SID}.desktop-released.json")
    released.symlink_to(real)
    assert _due_paths(box, root) == set()
    released.unlink()
    shutil.copyfile(real, released)
    assert _due_paths(box, root) == {str(session)}


def test_a_projects_folder_given_reads_the_settings_beside_it(box, monkeypatch, tmp_path):
    """`doctor --root DIR/projects` is about the Claude Code whose config dir
    is DIR (as refresh reads DIR/history.jsonl): DIR/settings.json, not the
    settings of the Claude Code this shell runs."""
    settings(box["cfg"] / "settings.json", cleanupPeriodDays=90)
    elsewhere = tmp_path / "mine"
    settings(elsewhere / "settings.json", cleanupPeriodDays=5)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(elsewhere))
    _refresh(box)
    out = run("doctor", "--db", box["db"], "--cwd", box["cwd"], "--root", box["cfg"] / "projects", ok=True).output
    assert out.startswith(f"Retention: cleanupPeriodDays = 90 ({box['cfg'] / 'settings.json'})"), out
    out = run("doctor", "--db", box["db"], "--cwd", box["cwd"], ok=True).output
    assert out.startswith(f"Retention: cleanupPeriodDays = 5 ({elsewhere / 'settings.json'})"), out


def test_doctor_before_the_first_refresh_reports_all_the_same_and_makes_no_catalog(box, monkeypatch):
    """A worried user runs doctor first: the retention, what goes next (none
    of it held), the price data of the library; no catalog file appears."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(box["cfg"]))
    old = _sessions(box)[0]
    _age(old, 40)
    none = box["db"].with_name("none.db")
    args = ("doctor", "--db", none, "--cwd", box["cwd"])
    out = run(*args, ok=True).output
    assert out.startswith("Retention: cleanupPeriodDays = 30 (Claude Code default)"), out
    assert "none held (no catalog yet: run `txdb refresh` now):" in out
    assert f"{old.stem} {old.parent.name} at Claude Code's next start: NOT held whole (no catalog yet: run " \
           "`txdb refresh` now)" in out
    assert "none catalogued (no catalog yet" in out and "Hook: not installed" in out
    assert f"data of {cost.data_date()}" in out and "History: not read (no catalog yet" in out
    got = json.loads(run(*args, "--json", ok=True).output)
    assert got["catalog"] is False and got["history"] is None and got["prices"]["data_date"] == cost.data_date()
    [d] = [d for d in got["due"] if d["path"] == str(old)]
    assert not d["whole"] and d["not_whole"] == [str(old)]
    assert not none.exists() and not list(none.parent.glob("none.db*"))
    none.write_bytes(b"")  # an empty file is no catalog either, and stays empty
    assert "no catalog yet" in run(*args, ok=True).output and none.stat().st_size == 0


def test_a_tool_results_file_older_than_its_session_file_is_due_by_its_own_mtime(box, tmp_path, monkeypatch):
    """Claude Code's cleanup deletes a tool-results file by its own mtime when
    older than its session file's (doctor.sweep_mtime_ns), and without the
    session file: doctor lists it under its session, held whole when the
    catalog's sidecars hold its bytes."""
    root, session, _agent, _named, _beside = _project(box, tmp_path)
    results = session.with_suffix("") / "tool-results"
    results.mkdir()
    old, new = results / "toolu_old.txt", results / "toolu_new.txt"
    old.write_text("an old tool result\n")
    new.write_text("a fresh one\n")
    _age(old, 40)  # past the cutoff, while its session file is a day old
    due = _due(box, root)
    assert set(due) == {str(old)}  # the fresh one goes with the session file, not now
    d = due[str(old)]
    assert (d.session_id, d.files, d.tool_results, d.deleted_in_days, d.lone) == (session.stem, 1, 1, 0, False)
    assert d.whole
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(box["cfg"]))
    args = ("doctor", "--db", box["db"], "--cwd", box["cwd"], "--root", root)
    out = run(*args, ok=True).output
    assert f"{session.stem} -p (tool-results file older than the session file, by its own mtime) at Claude " \
           "Code's next start: held whole" in out, out

    old.write_text("an old tool resulT\n")  # other bytes, the catalogued size, another mtime: hashed, not held
    _age(old, 41)
    r = doctor.doctor(db.connect(box["db"]), box["cfg"], [root], box["cwd"], managed=box["managed"], now=NOW)
    [d] = r.due
    assert not d.whole and d.not_whole == [str(old)]
    assert "NOT held whole (1 of 1 files)" in run(*args, ok=True).output

    old.write_text("an old tool result\n")
    _age(old, 41)  # its catalogued bytes again, its mtime moved: hashed, held
    assert doctor.doctor(db.connect(box["db"]), box["cfg"], [root], box["cwd"], managed=box["managed"],
                         now=NOW).due[0].whole
    session.unlink()  # without its session file: each by its own mtime
    _age(new, 10)
    due = _due(box, root, within=30)
    assert due[str(old)].lone and due[str(old)].whole and due[str(old)].tool_results == 1
    assert due[str(new)].lone and due[str(new)].deleted_in_days == pytest.approx(20, abs=0.01)
    out = run(*args, ok=True).output
    assert "(tool-results file without the session file, by its own mtime) at Claude Code's next start" in out, out


def test_a_session_is_whole_only_with_every_file_of_its_folder(box, tmp_path):
    """The cleanup deletes a session's folder with its session file: its
    tool-results files no older than the session file, its persisted files
    and subagents' .meta.json go too, so the entry counts them and is held
    whole only when the catalog holds each at its size on disk."""
    root, session, _agent, _named, _beside = _project(box, tmp_path)
    folder = session.with_suffix("")
    kept = {folder / "tool-results" / "toolu_new.txt": "a fresh tool result\n",
            folder / "persisted" / "text" / "p1.txt": "a persisted text\n",
            next(folder.glob("subagents/agent-*.jsonl")).with_suffix(".meta.json"): '{"agentType":"x"}'}
    for p, text in kept.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        _age(p, 1)
    _age(session, 40)
    d = _due(box, root)[str(session)]
    assert (d.files, d.tool_results, d.whole) == (2 + len(kept), 1, True), d
    late = folder / "persisted" / "text" / "p2.txt"  # written after the refresh: the catalog lacks it
    late.write_text("written since\n")
    grown = folder / "tool-results" / "toolu_new.txt"
    grown.write_text("a fresh tool result, longer now\n")
    r = doctor.doctor(db.connect(box["db"]), box["cfg"], [root], box["cwd"], managed=box["managed"], now=NOW)
    [d] = [d for d in r.due if d.path == str(session)]
    assert (d.files, d.whole, sorted(d.not_whole)) == (3 + len(kept), False, sorted([str(late), str(grown)])), d


def test_a_file_of_the_folder_whose_name_refresh_cannot_read_makes_the_entry_not_whole(box, tmp_path):
    """A name that is not UTF-8 is never catalogued, and the cleanup deletes
    it with the folder: the session's entry counts it, not held."""
    root, session, _agent, _named, _beside = _project(box, tmp_path)
    folder = session.with_suffix("")
    odd = os.path.join(os.fsencode(folder), b"bad\xffname.txt")
    with open(odd, "wb") as fh:
        fh.write(b"x\n")
    _age(session, 40)
    d = _due(box, root)[str(session)]
    assert not d.whole and d.files == 3, d
    assert d.not_whole == [os.path.join(str(folder), "bad\\xffname.txt")], d.not_whole


def test_a_last_line_not_ended_is_said_as_it_is_never_run_refresh(box, monkeypatch):
    """A session file cut mid-line (its writer died, or is still writing):
    refresh catalogues it to its last newline and can read no more until
    the line ends, so doctor names the unfinished line and its bytes, not
    `run txdb refresh`; the entry stays not whole, and once the line ends a
    refresh makes it whole."""
    f = _sessions(box)[0]
    with open(f, "ab") as fh:
        fh.write(b'{"type":"summary","summ')
    _age(f, 31)
    _refresh(box)
    out = _cli(box, monkeypatch).output
    assert "run `txdb refresh`" not in out, out
    assert "1 not (1 only for a last line unfinished: refresh reads it once it ends)" in out, out
    assert (f"{f.name}: its last line is unfinished (23 bytes after the last newline), refresh reads it once "
            "it ends)") in out, out
    assert "0 changed since the last refresh, 1 catalogued up to a last line unfinished" in out, out
    got = json.loads(_cli(box, monkeypatch, "--json").output)
    assert got["stale"] == [] and got["unfinished"] == [{"path": str(f), "bytes": 23}], got
    (d,) = [d for d in got["due"] if d["path"] == str(f)]
    assert not d["whole"] and d["not_whole"] == [str(f)] and d["unfinished"] == [{"path": str(f), "bytes": 23}]
    with open(f, "ab") as fh:  # a whole line after it: that one refresh does read
        fh.write(b'mary":"x","leafUuid":"y"}\n{"type":"summary","summary":"z","leafUuid":"y"}\n')
    _age(f, 31)
    got = json.loads(_cli(box, monkeypatch, "--json").output)
    assert got["stale"] == [str(f)] and got["unfinished"] == [], got
    assert "run `txdb refresh` now" in _cli(box, monkeypatch).output
    _refresh(box)
    got = json.loads(_cli(box, monkeypatch, "--json").output)
    assert got["stale"] == got["unfinished"] == [] and [d["whole"] for d in got["due"] if d["path"] == str(f)] == [True]


def test_a_linked_project_folder_is_named_as_not_catalogued_with_what_to_do(box, monkeypatch, tmp_path):
    """A project folder moved to another disk and linked back: doctor does
    not follow the link either, so it names it (text and --json) as not
    catalogued, its sessions neither counted nor checked, and what to do."""
    projects = box["cfg"] / "projects"
    folder = next(p for p in sorted(projects.iterdir()) if p.is_dir() and len(list(p.rglob("*.jsonl"))) > 1)
    inside = len(list(folder.rglob("*.jsonl")))
    _refresh(box)
    disk = tmp_path / "disk"
    disk.mkdir()
    shutil.move(folder, disk / folder.name)
    os.symlink(disk / folder.name, folder)
    got = json.loads(_cli(box, monkeypatch, "--json").output)
    assert got["linked"] == [{"path": str(folder), "root": str(projects), "target": str(disk / folder.name),
                              "root_to_give": str(disk), "catalogued": inside, "catalogued_at_target": 0}], got["linked"]
    out = _cli(box, monkeypatch).output
    assert "Linked folders: 1 not followed (txdb never follows a link): no session under it is catalogued" in out
    assert f"`txdb refresh --root {disk}`, then `txdb doctor` with the same --root" in out, out
    assert (f"    {folder} -> {disk / folder.name} ({inside} files catalogued under the link, as last read)"
            in out), out
    run("refresh", "--db", box["db"], "--root", disk, ok=True)  # as it says: the target's folder as a root
    checked = json.loads(_cli(box, monkeypatch, "--root", disk, "--json").output)
    assert checked["session_files"] == inside and checked["stale"] == checked["not_catalogued"] == []
