"""The Claude Code plugin in the real CLI: with ``--plugin-dir`` the skill
is offered to the model, the model's Bash call to ``txdb current --quiet``
gets the live session's own file, and the hooks leave the catalog holding
every line of the session once it ends."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from realcli import Sandbox, claude_binary  # noqa: E402
from realcli.fake_api import bash, text, tool_use  # noqa: E402

from txdb.model.claude_code import plugin_info  # noqa: E402

pytestmark = pytest.mark.realcli

BIN = Path(sys.executable).parent  # this environment's txdb and txdb-hook


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (BIN / "txdb").is_file() or not (BIN / "txdb-hook").is_file():
        pytest.skip(f"txdb is not installed in {BIN} (pip install -e .)")
    root = tmp_path_factory.mktemp("plugin")
    catalog = root / "catalog.db"
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "TXDB_DB": str(catalog)}
    with Sandbox(claude_binary(), root, env_extra=env) as sb:
        sb.script(
            tool_use("Skill", {"skill": "txdb:txdb"}),
            bash("txdb current --quiet", "Find this session's file"),
            text("This session is the file above."),
        )
        r = sb.run("Which file is this session?", extra_args=["--plugin-dir", plugin_info().path]).check()
        yield sb, r, catalog


def test_the_skill_is_offered_and_its_instructions_load(run):
    sb, r, _ = run
    first = sb.api.message_requests("main")[0]
    listed = json.dumps(first.body)
    assert "txdb:txdb: Use when a Claude Code session is too long" in listed
    # The model invoked the skill: the next request carries SKILL.md's body.
    after = json.dumps(sb.api.message_requests("main")[1].body["messages"][-2:])
    assert "## Slimming a session" in after and "`txdb current --quiet` prints its `.jsonl` path" in after


def test_bash_txdb_current_gets_the_live_sessions_own_file(run):
    sb, r, _ = run
    path = str(sb.session_file(r.session_id))
    reply = sb.api.message_requests("main")[2].body["messages"][-1]
    results = [b for b in reply["content"] if b.get("type") == "tool_result"]
    assert results and not results[0]["is_error"], reply
    content = results[0]["content"]
    out = content if isinstance(content, str) else "".join(c.get("text", "") for c in content)
    assert out.strip() == path


def test_after_the_session_ends_the_catalog_holds_all_its_lines(run):
    sb, r, catalog = run
    path = sb.session_file(r.session_id)
    with path.open("rb") as f:
        on_disk = sum(1 for _ in f)
    conn = sqlite3.connect(catalog)
    row = conn.execute("SELECT lines, kind FROM files WHERE path = ?", (str(path),)).fetchone()
    records = conn.execute("SELECT count(*) FROM records r JOIN files f ON f.id = r.file_id WHERE f.path = ?",
                           (str(path),)).fetchone()[0]
    conn.close()
    # `txdb current` indexed the file mid-turn; only the hooks can have read
    # the lines written after it (the Bash result, the last reply).
    assert row == (on_disk, "session")
    assert records == on_disk
    assert not (catalog.parent / "txdb-hook.log").exists()


def test_the_plugin_folder_is_a_marketplace_the_real_cli_installs_from(tmp_path):
    """`claude plugin marketplace add <folder>` and `claude plugin install
    txdb@txdb` (the commands `txdb plugin` prints) work with the real CLI's
    plugin commands, and a launch without --plugin-dir then offers the skill
    and runs the hooks."""
    import subprocess

    from realcli.driver import clean_env

    if not (BIN / "txdb").is_file() or not (BIN / "txdb-hook").is_file():
        pytest.skip(f"txdb is not installed in {BIN} (pip install -e .)")
    catalog = tmp_path / "catalog.db"
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "TXDB_DB": str(catalog)}
    info = plugin_info()
    before = sorted(p.relative_to(info.path) for p in Path(info.path).rglob("*"))
    with Sandbox(claude_binary(), tmp_path, env_extra=env) as sb:
        cli_env = clean_env(sb.home, sb.api.base_url, env)
        claude = str(sb.binary)
        for command in info.install:
            argv = command.split()
            assert argv[0] == "claude"
            p = subprocess.run([claude, *argv[1:]], env=cli_env, cwd=sb.cwd, capture_output=True, text=True,
                               timeout=120, stdin=subprocess.DEVNULL)
            assert p.returncode == 0, (command, p.stdout, p.stderr)
        listed = subprocess.run([claude, "plugin", "list", "--json"], env=cli_env, cwd=sb.cwd,
                                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert listed.returncode == 0, listed.stderr
        (installed,) = [p for p in json.loads(listed.stdout) if p["id"] == "txdb@txdb"]
        assert installed["enabled"] is True
        sb.script(text("Nothing to do."))
        r = sb.run("Hello").check()  # no --plugin-dir: the installed plugin loads
        first = json.dumps(sb.api.message_requests("main")[0].body)
        assert "txdb:txdb: Use when a Claude Code session is too long" in first
        path = sb.session_file(r.session_id)
    conn = sqlite3.connect(catalog)  # the Stop/SessionEnd hooks ran from the installed copy
    row = conn.execute("SELECT lines FROM files WHERE path = ?", (str(path),)).fetchone()
    conn.close()
    with path.open("rb") as f:
        assert row == (sum(1 for _ in f),)
    # The plugin's folder is only read.
    assert sorted(p.relative_to(info.path) for p in Path(info.path).rglob("*")) == before
