"""`txdb statusline` as the real CLI runs it: Claude Code (interactive,
in tmux) runs the statusLine command with its payload on stdin, after the
plugin's Stop hook catalogued the session; the bar shows txdb's line, and
its figures are the catalog's for that session."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from realcli import Sandbox, claude_binary  # noqa: E402
from realcli.driver import clean_env  # noqa: E402
from realcli.fake_api import text  # noqa: E402

from txdb.model.claude_code import plugin_info  # noqa: E402

pytestmark = pytest.mark.realcli

BIN = Path(sys.executable).parent


def _accept_first_run(sb: Sandbox) -> None:
    """What a user has answered once: onboarding, the API key, the folder's trust."""
    cj = sb.home / ".claude.json"
    c = json.loads(cj.read_text()) if cj.exists() else {}
    c["hasCompletedOnboarding"] = True
    c["customApiKeyResponses"] = {"approved": ["sk-test"], "rejected": []}
    c.setdefault("projects", {}).setdefault(str(sb.cwd), {})["hasTrustDialogAccepted"] = True
    cj.write_text(json.dumps(c))


def test_the_status_bar_shows_txdbs_line_for_the_live_session(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed: the interactive CLI needs a terminal")
    if not (BIN / "txdb").is_file() or not (BIN / "txdb-hook").is_file():
        pytest.skip(f"txdb is not installed in {BIN} (pip install -e .)")
    catalog = tmp_path / "catalog.db"
    payload_file = tmp_path / "payload.json"
    env = {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "TXDB_DB": str(catalog)}
    plugin = ["--plugin-dir", plugin_info().path]
    with Sandbox(claude_binary(), tmp_path / "box", env_extra=env) as sb:
        sb.script(text("Hello."), text("Still here."))
        r = sb.run("Say hello", extra_args=plugin).check()  # the Stop hook catalogues the session
        sid = r.session_id
        conn = sqlite3.connect(catalog)
        want = conn.execute("SELECT c.est_context_tokens, c.cost_usd FROM session_costs c JOIN files f "
                            "ON f.id = c.file_id WHERE f.session_id = ? AND f.kind = 'session'", (sid,)).fetchone()
        conn.close()
        assert want is not None and want[0] > 0

        settings = sb.home / ".claude" / "settings.json"
        s = json.loads(settings.read_text()) if settings.exists() else {}
        s["statusLine"] = {"type": "command", "command": f"tee {shlex.quote(str(payload_file))} | txdb statusline"}
        settings.write_text(json.dumps(s))
        _accept_first_run(sb)
        cli_env = {**clean_env(sb.home, sb.api.base_url, env), "TERM": "xterm-256color"}
        name = f"txdb-sl-{os.getpid()}"
        cmd = " ".join(["cd", shlex.quote(str(sb.cwd)), "&&", "exec", "env", "-i",
                        *[shlex.quote(f"{k}={v}") for k, v in cli_env.items()],
                        shlex.quote(str(sb.binary)), "--resume", sid, *map(shlex.quote, plugin)])
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "200", "-y", "40", cmd], check=True)
        try:
            screen = ""
            for _ in range(60):
                time.sleep(1)
                screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True,
                                        text=True).stdout
                if payload_file.exists() and payload_file.stat().st_size and " session" in screen:
                    break
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
    payload = json.loads(payload_file.read_text())
    assert payload["session_id"] == sid and payload["transcript_path"].endswith(f"{sid}.jsonl")
    # the line txdb prints for that payload is the one on the screen
    again = subprocess.run([str(BIN / "txdb"), "statusline", "--db", str(catalog), "--json"],
                           input=json.dumps(payload).encode(), capture_output=True, timeout=60)
    got = json.loads(again.stdout)
    assert got["line"] in screen, screen
    assert got["model"] == payload["model"]["display_name"]
    assert (got["context_tokens"], got["context_source"]) == (want[0], "txdb")
    assert got["window_tokens"] == payload["context_window"]["context_window_size"]
    assert got["session_usd"] == pytest.approx(want[1])
