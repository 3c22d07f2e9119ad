"""history.jsonl as the real CLI writes it: an interactive session (in
tmux; `claude -p` writes no history) types a prompt, its transcript is
deleted before txdb ever saw it, and `txdb refresh` then lists the session
as gone before txdb, with that prompt, its time, cwd and sessionId, and
`txdb search` finds it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import run  # noqa: E402
from realcli import Sandbox, claude_binary  # noqa: E402
from realcli.driver import clean_env  # noqa: E402
from realcli.fake_api import text  # noqa: E402

pytestmark = pytest.mark.realcli

PROMPT = "please remember the quokka named Ferdinand"


def _accept_first_run(sb: Sandbox) -> None:
    """What a user has answered once: onboarding, the API key, the folder's trust."""
    cj = sb.home / ".claude.json"
    c = json.loads(cj.read_text()) if cj.exists() else {}
    c["hasCompletedOnboarding"] = True
    c["bypassPermissionsModeAccepted"] = True  # the CLI runs with --dangerously-skip-permissions
    c["customApiKeyResponses"] = {"approved": ["sk-test"], "rejected": []}
    c.setdefault("projects", {}).setdefault(str(sb.cwd), {})["hasTrustDialogAccepted"] = True
    cj.write_text(json.dumps(c))


def test_a_session_swept_before_txdb_is_listed_from_the_history_the_cli_wrote(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed: the interactive CLI needs a terminal")
    with Sandbox(claude_binary(), tmp_path / "box") as sb:
        sb.script(text("Noted: Ferdinand."))
        _accept_first_run(sb)
        cli_env = {**clean_env(sb.home, sb.api.base_url), "TERM": "xterm-256color"}
        name = f"txdb-hist-{os.getpid()}"
        cmd = " ".join(["cd", shlex.quote(str(sb.cwd)), "&&", "exec", "env", "-i",
                        *[shlex.quote(f"{k}={v}") for k, v in cli_env.items()],
                        shlex.quote(str(sb.binary)), "--dangerously-skip-permissions"])
        history = sb.home / ".claude" / "history.jsonl"
        screen = ""
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "200", "-y", "40", cmd], check=True)
        try:
            time.sleep(8)  # the prompt box is up
            subprocess.run(["tmux", "send-keys", "-t", name, "-l", PROMPT], check=True)
            time.sleep(1)
            subprocess.run(["tmux", "send-keys", "-t", name, "Enter"], check=True)
            for _ in range(60):
                time.sleep(1)
                screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True,
                                        text=True).stdout
                files = list(sb.projects_dir.glob("*/*.jsonl"))
                if (history.exists() and PROMPT in history.read_text() and files
                        and "Ferdinand." in files[0].read_text()):
                    break
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
    assert history.exists(), f"the CLI wrote no history.jsonl; its screen:\n{screen}"
    [written] = [json.loads(line) for line in history.read_text().splitlines() if PROMPT in line]
    [transcript] = list(sb.projects_dir.glob("*/*.jsonl"))
    sid = transcript.stem
    assert written["sessionId"] == sid and written["project"] == str(sb.cwd)
    transcript.unlink()  # swept before txdb ever ran

    catalog = tmp_path / "c.db"
    run("refresh", "--db", catalog, "--root", sb.projects_dir, ok=True)
    r = run("history", "--db", catalog, "--before-txdb", "--json", ok=True)
    [row] = json.loads(r.output)
    assert (row["session_id"], row["cwd"], row["prompts"], row["first_prompt_text"]) == (sid, str(sb.cwd), 1, PROMPT)
    ms = written["timestamp"]
    assert row["first_prompt"] == time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"
    hits = json.loads(run("search", "--db", catalog, "quokka Ferdinand", "--json", ok=True).output)
    assert [(h["session_id"], h["kind"]) for h in hits] == [(sid, "history")]
