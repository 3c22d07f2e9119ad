"""txdb's Claude Code plugin without the CLI: its files, `txdb plugin`,
and the hook (`txdb-hook`) run as Claude Code runs it, with a JSON payload on
stdin, against real session files and a real catalog. Also `txdb --version`
and shell completion."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner

from txdb.model.claude_code import plugin_info
from txdb.cli import cli

DATA = Path(__file__).resolve().parent / "data" / "cli"
SUBAGENT_DEMO = DATA / "-tmp-txdb-cli-fixtures-subagent-demo"
PLUGIN = Path(plugin_info().path)


def front_matter(text: str) -> dict[str, str]:
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert m, "SKILL.md starts with a front matter block"
    return dict(line.split(": ", 1) for line in m.group(1).splitlines())


def test_the_plugin_folder_is_what_claude_code_reads():
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "txdb" and manifest["version"] == version("txdb")
    skill = front_matter((PLUGIN / "skills" / "txdb" / "SKILL.md").read_text())
    assert skill["name"] == "txdb" and "Prompt is too long" in skill["description"]
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text())["hooks"]
    for event in ("Stop", "SessionEnd"):
        (entry,) = hooks[event]
        assert entry["hooks"] == [{"type": "command", "command": "txdb-hook", "timeout": 10}]


def test_every_command_the_skill_names_exists():
    text = (PLUGIN / "skills" / "txdb" / "SKILL.md").read_text()
    named = set(re.findall(r"`txdb ([a-z][a-z-]+)", text)) | set(re.findall(r"^\d\. `([a-z]+-?[a-z]+)`", text, re.M))
    named |= set(re.findall(r"`(strip-[a-z]+)`", text))
    help_text = CliRunner().invoke(cli, ["--help"]).output
    listed = set(re.findall(r"^  ([a-z][a-z-]+) ", help_text, re.M))
    assert {"current", "analyze", "verify", "apply", "query", "strip-all", "strip-tools"} <= named
    assert named <= listed, named - listed


def test_txdb_plugin_prints_the_folder_and_the_command_that_enables_it():
    r = CliRunner().invoke(cli, ["plugin"])
    assert r.exit_code == 0, r.output
    assert f"Plugin folder: {PLUGIN}\n" in r.output
    assert f"Enable it:     claude --plugin-dir {PLUGIN}\n" in r.output
    assert (f"Install it:    claude plugin marketplace add {PLUGIN} && claude plugin install txdb@txdb\n"
            in r.output)
    info = json.loads(CliRunner().invoke(cli, ["plugin", "--json"]).output)
    assert info["path"] == str(PLUGIN) and (Path(info["path"]) / ".claude-plugin" / "plugin.json").is_file()


def test_version():
    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0 and r.output == f"txdb, version {version('txdb')}\n"


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F _txdb_completion txdb"),
                                           ("zsh", "compdef _txdb_completion txdb"),
                                           ("fish", "complete --no-files --command txdb")])
def test_shell_completion_script(shell, marker):
    txdb = Path(sys.executable).parent / "txdb"
    if not txdb.is_file():
        pytest.skip("txdb is not installed in this environment")
    out = subprocess.run([str(txdb)], env={**os.environ, "_TXDB_COMPLETE": f"{shell}_source"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and marker in out.stdout


# -- the hook


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A HOME whose projects folder holds a copy of a CLI-made session with a subagent."""
    projects = tmp_path / "home" / ".claude" / "projects"
    shutil.copytree(SUBAGENT_DEMO, projects / SUBAGENT_DEMO.name)
    return tmp_path


def hook(home: Path, payload, db: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CONFIG_DIR", "XDG_DATA_HOME")}
    env.update(HOME=str(home / "home"), TXDB_DB=str(db or home / "catalog.db"))
    data = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    return subprocess.run([sys.executable, "-m", "txdb.hook"], input=data if isinstance(data, bytes) else data.encode(),
                          env=env, capture_output=True, timeout=60)


def session_of(home: Path) -> Path:
    return next((home / "home" / ".claude" / "projects").glob("*/*.jsonl"))


def count_lines(p: Path) -> int:
    return p.read_bytes().count(b"\n")


def test_the_hook_indexes_that_sessions_files_only(home):
    session = session_of(home)
    other = session.parent / "0000aaaa-0000-4000-8000-000000000000.jsonl"
    shutil.copy(session, other)
    r = hook(home, {"session_id": session.stem, "transcript_path": str(session), "hook_event_name": "SessionEnd"})
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    conn = sqlite3.connect(home / "catalog.db")
    rows = dict(conn.execute("SELECT path, lines FROM files").fetchall())
    (sub,) = (session.parent / session.stem / "subagents").glob("*.jsonl")
    assert rows == {str(session): count_lines(session), str(sub): count_lines(sub)}
    assert conn.execute("SELECT s.parent_session_id FROM sessions s JOIN files f ON f.id = s.file_id "
                        "WHERE f.path = ?", (str(sub),)).fetchone() == (session.stem,)
    # The session goes on (Stop): the next hook reads the new lines.
    with session.open("ab") as f:
        f.write(other.read_bytes().splitlines(keepends=True)[0])
    assert hook(home, {"transcript_path": str(session), "hook_event_name": "Stop"}).returncode == 0
    assert conn.execute("SELECT lines FROM files WHERE path = ?", (str(session),)).fetchone() == (count_lines(session),)
    assert not (home / "txdb-hook.log").exists()


def test_the_hook_reads_the_prompt_history_jsonl_kept(home, monkeypatch):
    """The prompt Claude Code adds to history.jsonl as the session grows is
    catalogued by the next hook, as `txdb refresh` would."""
    session = session_of(home)
    history = home / "home" / ".claude" / "history.jsonl"
    prompt = {"display": "a prompt the hook catalogues", "pastedContents": {}, "timestamp": 1764000000000,
              "project": "/tmp/txdb-cli-fixtures/subagent-demo", "sessionId": session.stem}
    history.write_text(json.dumps(prompt) + "\n")
    assert hook(home, {"transcript_path": str(session), "hook_event_name": "Stop"}).returncode == 0
    conn = sqlite3.connect(home / "catalog.db")
    assert conn.execute("SELECT session_id, display FROM history").fetchall() == [(session.stem, prompt["display"])]
    with history.open("a") as f:  # the next prompt, and the session's next line
        f.write(json.dumps({**prompt, "display": "the next one", "timestamp": 1764000001000}) + "\n")
    with session.open("ab") as f:
        f.write(session.read_bytes().splitlines(keepends=True)[0])
    assert hook(home, {"transcript_path": str(session), "hook_event_name": "Stop"}).returncode == 0
    assert [r[0] for r in conn.execute("SELECT display FROM history ORDER BY timestamp_ms")] == [
        prompt["display"], "the next one"]
    assert not (home / "txdb-hook.log").exists()
    # more than a turn's worth (a rewritten or hostile file): left to refresh, the hook stays quick
    with history.open("a") as f:
        f.write("{}" * 100_000 + "\n")
        f.write(json.dumps({**prompt, "display": "after the flood", "timestamp": 1764000002000}) + "\n")
    with session.open("ab") as f:
        f.write(session.read_bytes().splitlines(keepends=True)[0])
    assert hook(home, {"transcript_path": str(session), "hook_event_name": "Stop"}).returncode == 0
    assert conn.execute("SELECT count(*) FROM history").fetchone() == (2,)
    assert conn.execute("SELECT lines FROM files WHERE path = ?", (str(session),)).fetchone() == (
        count_lines(session),)  # the session itself is current
    monkeypatch.setenv("HOME", str(home / "home"))
    monkeypatch.setenv("TXDB_DB", str(home / "catalog.db"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    assert CliRunner().invoke(cli, ["refresh"]).exit_code == 0
    assert "after the flood" in {r[0] for r in conn.execute("SELECT display FROM history")}


@pytest.mark.parametrize("payload, logged", [
    (b"{not json", "JSONDecodeError"),
    (b"[1, 2]", "not a JSON object"),
    ({"session_id": "x"}, "no transcript_path"),
    ({"transcript_path": "/etc/passwd"}, "/etc/passwd is not a session file"),
    ({"transcript_path": "/tmp/elsewhere/x.jsonl"}, "/tmp/elsewhere/x.jsonl is outside the projects folder"),
    ({"transcript_path": "PROJECTS/../../../x.jsonl"}, "is outside the projects folder"),
])
def test_every_failure_is_a_log_line_and_exit_0(home, payload, logged):
    if isinstance(payload, dict) and payload.get("transcript_path", "").startswith("PROJECTS"):
        payload = {"transcript_path": payload["transcript_path"].replace(
            "PROJECTS", str(home / "home" / ".claude" / "projects"))}
    r = hook(home, payload)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    (line,) = (home / "txdb-hook.log").read_text().splitlines()
    assert logged in line
    assert not (home / "catalog.db").exists()  # nothing to index: no catalog made


def test_a_locked_catalog_is_given_up_quickly_and_logged(home):
    session = session_of(home)
    db = home / "catalog.db"
    first = hook(home, {"transcript_path": str(session)})  # creates the catalog
    assert first.returncode == 0
    with session.open("ab") as f:
        f.write(session.read_bytes().splitlines(keepends=True)[0])  # something to do
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        r = hook(home, {"transcript_path": str(session), "hook_event_name": "Stop"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (r.returncode, r.stderr) == (0, b"")
    assert "database is locked" in (home / "txdb-hook.log").read_text()
    # The next hook catches up.
    assert hook(home, {"transcript_path": str(session)}).returncode == 0
    assert sqlite3.connect(db).execute("SELECT lines FROM files WHERE path = ?", (str(session),)).fetchone() == (
        count_lines(session),)


def test_a_catalog_that_is_not_txdbs_is_left_alone(home):
    db = home / "other.db"
    sqlite3.connect(db).execute("CREATE TABLE mine (x)")
    r = hook(home, {"transcript_path": str(session_of(home))}, db=db)
    assert r.returncode == 0
    assert "not a txdb catalog" in (home / "txdb-hook.log").read_text()
    assert [n for (n,) in sqlite3.connect(db).execute("SELECT name FROM sqlite_master")] == ["mine"]


def test_txdb_plugin_warns_when_the_hook_command_is_not_on_path(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    r = CliRunner().invoke(cli, ["plugin"])
    assert r.exit_code == 0
    assert "Note: `txdb-hook` is not on PATH, so the plugin's hooks will not run" in r.output


def test_the_hook_refuses_a_pending_copy_and_a_backup(home):
    session = session_of(home)
    for name in (session.name + ".pending", session.name + ".bak"):
        shutil.copy(session, session.with_name(name))
        r = hook(home, {"transcript_path": str(session.with_name(name))})
        assert (r.returncode, r.stderr) == (0, b"")
        assert f"{name} is not a session file" in (home / "txdb-hook.log").read_text()
    assert not (home / "catalog.db").exists()


def test_the_skills_search_query_runs_on_a_catalog(home):
    """The "what did I do about X" query the skill teaches, as written there
    (its date window widened: the fixture's date is fixed)."""
    text = (PLUGIN / "skills" / "txdb" / "SKILL.md").read_text()
    m = re.search(r'txdb query "(select .*?)" -p q \'docker\'', text, re.S)
    assert m and "date('now', '-7 days')" in m.group(1)
    sql = m.group(1).replace("date('now', '-7 days')", "'2000-01-01'")
    session = session_of(home)
    assert hook(home, {"transcript_path": str(session)}).returncode == 0
    r = CliRunner().invoke(cli, ["query", "--db", str(home / "catalog.db"), sql, "-p", "q", "three lines"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert rows and rows[0]["session_id"] == session.stem and "three lines" in rows[0]["excerpt"]


def test_the_hook_catalogues_what_refresh_does_not_past_a_symlinked_folder(home, tmp_path):
    """A `<session>/subagents` folder that is a link out of the projects
    tree is not followed by the hook, as refresh does not follow it."""
    session = session_of(home)
    sub_folder = session.parent / session.stem / "subagents"
    outside = tmp_path / "outside"
    shutil.move(sub_folder, outside)
    os.symlink(outside, sub_folder)
    assert hook(home, {"transcript_path": str(session)}).returncode == 0
    hooked = {p for (p,) in sqlite3.connect(home / "catalog.db").execute("SELECT path FROM files")}
    assert hooked == {str(session)}
    r = CliRunner().invoke(cli, ["refresh", "--db", str(tmp_path / "full.db"),
                                 "--root", str(home / "home" / ".claude" / "projects")])
    assert r.exit_code == 0, r.output
    refreshed = {p for (p,) in sqlite3.connect(tmp_path / "full.db").execute("SELECT path FROM files")}
    assert hooked == refreshed


def test_the_hook_catalogues_a_symlinked_subagent_file_where_refresh_does(home, tmp_path):
    """A subagent transcript that is a link to a file outside the projects
    tree is catalogued under the link's own path (as refresh lists it),
    never under the outside path it points at; and a link beside its target
    (both in the tree) under the target, as refresh does."""
    session = session_of(home)
    subagents = session.parent / session.stem / "subagents"
    agent = next(subagents.glob("*.jsonl"))
    outside = tmp_path / "outside" / agent.name
    outside.parent.mkdir()
    shutil.move(agent, outside)
    os.symlink(outside, agent)
    twin = subagents / "agent-a0000000000000001.jsonl"
    os.symlink(agent.with_name("agent-real-copy.jsonl"), twin)
    shutil.copy(outside, agent.with_name("agent-real-copy.jsonl"))
    assert hook(home, {"transcript_path": str(session)}).returncode == 0
    hooked = {p for (p,) in sqlite3.connect(home / "catalog.db").execute("SELECT path FROM files")}
    assert str(outside) not in hooked
    r = CliRunner().invoke(cli, ["refresh", "--db", str(tmp_path / "full.db"),
                                 "--root", str(home / "home" / ".claude" / "projects")])
    assert r.exit_code == 0, r.output
    refreshed = {p for (p,) in sqlite3.connect(tmp_path / "full.db").execute("SELECT path FROM files")}
    assert hooked == refreshed == {str(session), str(agent), str(agent.with_name("agent-real-copy.jsonl"))}
    # The next refresh of the hook's catalog finds nothing to move.
    r = CliRunner().invoke(cli, ["refresh", "--db", str(home / "catalog.db"),
                                 "--root", str(home / "home" / ".claude" / "projects")])
    assert r.exit_code == 0, r.output
    assert {p for (p,) in sqlite3.connect(home / "catalog.db").execute("SELECT path FROM files")} == hooked
