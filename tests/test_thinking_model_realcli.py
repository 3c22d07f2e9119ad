"""Thinking written by another model is not sent (estimate.unsent_thinking).

The real CLI (2.1.328) writes a session on one model, with long thinking,
then a turn on another (``--model``): resumed on that model, it sends a
message's thinking only when the message's ``model`` is the request's. So
txdb's estimate of the session leaves the first model's thinking out, and
strip-thinking's plan does not count it as a saving: the predicted saving is
within 10% (or 200 tokens) of what the request shrinks by, and the session's
estimate within 5% of what the CLI sends. Before, the plan promised a
saving of 16,282 tokens (the other model's thinking, calibrated) where the
request shrank by none of it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realcli import claude_binary  # noqa: E402
from realcli.driver import Sandbox  # noqa: E402
from realcli.fake_api import bash, text, thinking  # noqa: E402
from realcli.oracle import resume  # noqa: E402

pytestmark = pytest.mark.realcli

TXDB = str(Path(sys.executable).parent / "txdb")
FIRST, NOW = "claude-sonnet-4-6", "claude-opus-5"


def _sent(path: Path, binary, work: Path) -> tuple[int, str]:
    r = resume(path, ping="thinking-ping", binary=binary, workdir=work, timeout=300, extra_args=("--model", NOW))
    assert r.loaded and not r.compacted, r.summary()
    body = r.main_request
    dump = lambda x: len(json.dumps(x, ensure_ascii=False, separators=(",", ":"))) if x is not None else 0  # noqa: E731
    return (dump(body.get("system")) + dump(body.get("tools")) + dump(body.get("messages"))) // 4, r.messages_text()


def _txdb(*args, cwd):
    p = subprocess.run([TXDB, *args, "--json"], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_other_models_thinking_is_neither_estimated_nor_promised(tmp_path):
    binary = claude_binary()
    with Sandbox(binary, tmp_path / "make") as sb:
        sb.script(
            thinking("FIRST-MODEL-THINKING " + "weighing the options at length. " * 200) + bash("echo one", "One"),
            thinking("FIRST-MODEL-THINKING again " + "more careful reasoning here. " * 200) + text("Done: one."),
            text("Second turn, on the other model."),
        )
        r = sb.run("Run echo one.", extra_args=("--model", FIRST)).check()
        sb.run("And now?", resume=r.session_id, extra_args=("--model", NOW)).check()
        made = sb.session_file(r.session_id)
        models = [json.loads(x).get("message", {}).get("model") for x in made.read_text().splitlines()
                  if json.loads(x).get("type") == "assistant"]
        assert FIRST in models and models[-1] == NOW, models
        work = tmp_path / "copy"
        proj = work / "projects" / "p"
        proj.mkdir(parents=True)
        path = proj / made.name
        shutil.copyfile(made, path)
    before, sent_text = _sent(path, binary, tmp_path / "r0")
    assert "FIRST-MODEL-THINKING" not in sent_text  # what the rule rests on
    db = ["--db", str(work / "c.db")]
    rep = _txdb("strip-thinking", str(path), *db, cwd=work)
    assert rep["changed_lines"] > 0
    subprocess.run([TXDB, "apply", str(path), *db], cwd=work, check=True, capture_output=True)
    after, _ = _sent(path, binary, tmp_path / "r1")
    saving, shrink = rep["tokens_before"] - rep["tokens_after"], before - after
    assert abs(saving - shrink) <= max(200, 0.10 * abs(shrink)), (saving, shrink)
    assert 0.95 * before <= rep["tokens_before"] <= 1.05 * before, (rep["tokens_before"], before)
