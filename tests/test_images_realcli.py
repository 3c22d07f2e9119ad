"""The real Claude Code CLI judges replace-images, compact --before and undo:
after each, the session (or the new one) resumes without compacting and
sends what it should."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
from functools import partial
from pathlib import Path

import pytest

from conftest import run as txdb

pytestmark = pytest.mark.realcli

DATA = Path(__file__).parent / "data"
TOOL_IMAGES = next((DATA / "generated" / "-home-user-src-demo-14").glob("*.jsonl"))   # PNG reads in tool results
PASTED = next((DATA / "real" / "-Users-dain-workspace-danieldemmel-me-next").glob("*.jsonl"))  # a pasted screenshot
TOOLS_DEMO = next((DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo").glob("*.jsonl"))


@pytest.fixture(scope="module")
def resume():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from realcli.oracle import resume as _resume
    return _resume


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    return tmp_path


def _copy(env, src: Path) -> Path:
    d = env / "claude" / "projects" / src.parent.name
    d.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(src, d / src.name))


run = partial(txdb, ok=True)


def _hashes(f: Path) -> set[str]:
    rows = json.loads(run("list-images", f, "--json").output)
    return {x["sha256"] for x in rows if x["sha256"]}


def _image_data(r) -> list[str]:
    """base64 data of every image block the resumed request sent (nested in tool results too)."""
    out = []
    for b in r.blocks():
        inner = b.get("content") if b.get("type") == "tool_result" and isinstance(b.get("content"), list) else [b]
        out += [x["source"]["data"] for x in inner if isinstance(x, dict) and x.get("type") == "image"]
    return out


@pytest.mark.parametrize("src", [TOOL_IMAGES, PASTED], ids=["tool-result-images", "pasted-image"])
def test_replace_images_then_apply_resumes_with_transcripts(resume, env, tmp_path, src):
    f = _copy(env, src)
    base = resume(f, "ping", workdir=tmp_path / "base")
    assert base.loaded and not base.compacted and _image_data(base), base.summary()
    hashes = _hashes(f)
    d = tmp_path / "transcripts"
    d.mkdir()
    for h in hashes:
        (d / f"{h}.txt").write_text(f"transcript of {h[:12]}: a chart with three bars", encoding="utf-8")
    run("replace-images", f, "--dir", d, "--apply")
    r = resume(f, "ping", workdir=tmp_path / "after")
    assert r.loaded and not r.compacted, r.summary()
    sent = {hashlib.sha256(base64.b64decode(x)).hexdigest() for x in _image_data(r)}
    assert not sent & hashes                                       # no replaced image is sent
    for h in hashes:
        assert f'<image sha256="{h}"' in r.messages_text() and f"transcript of {h[:12]}" in r.messages_text()
    assert len(r.user_assistant_messages()) == len(base.user_assistant_messages())


@pytest.mark.parametrize("src,before", [(TOOLS_DEMO, 26), (TOOL_IMAGES, 36)], ids=["at-a-prompt", "mid-turn"])
def test_compact_before_resumes_under_the_new_id(resume, env, tmp_path, src, before):
    f = _copy(env, src)
    original = f.read_bytes()
    base = resume(f, "ping", workdir=tmp_path / "base")
    rep = json.loads(run("compact", f, "--before", before, "--json").output)
    new = Path(rep["target"])
    r = resume(new, "ping", workdir=tmp_path / "new", siblings=[f])
    assert r.loaded and not r.compacted, r.summary()
    msgs = r.user_assistant_messages()
    first = msgs[0]["content"]
    first_text = first if isinstance(first, str) else "\n".join(
        b.get("text", "") for b in first if isinstance(b, dict))
    assert "compacted by txdb" in first_text and "<dialogue>" in first_text
    # Every message from the cut on, in order: the tail of the original's request
    # (less the thinking the API drops after an edit of earlier history, which
    # the engine takes out as after every surgery: preserved thinking).
    # The last message is the ping, where the CLI adds its own reminders; a
    # user prompt at the cut joins the summary's (user) message.
    kept = _sans_thinking(msgs[1:-1])
    whole = base.user_assistant_messages()
    assert kept and _sans_thinking(whole[-len(kept) - 1:-1]) == kept
    assert _text(whole[-len(kept) - 2]) in first_text or whole[-len(kept) - 2]["role"] == "assistant"
    assert len(kept) < len(whole)
    # The original still resumes unchanged.
    assert f.read_bytes() == original
    again = resume(f, "ping", workdir=tmp_path / "again", siblings=[new])
    assert again.loaded and again.user_assistant_messages() == whole


def _context_before_ping(r) -> int:
    """What the CLI sent, as the fake API bills it (request chars / 4: system,
    messages, tools), less the ping and what the CLI adds for that turn (the
    session file did not hold them when txdb measured it)."""
    from realcli.fake_api import usage_for
    body = dict(r.main_request)
    msgs = body["messages"]
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    body["messages"] = msgs[:last_user]
    u = usage_for(body, 1)
    return u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]


@pytest.mark.parametrize("src,before", [(TOOLS_DEMO, 26), (TOOL_IMAGES, 36)], ids=["at-a-prompt", "mid-turn"])
def test_compact_before_keeps_the_system_prompt_and_announcements(resume, env, tmp_path, src, before):
    """The prompt_snapshot and announcement records of the cut part stay (the
    same rule compact-range follows): the resumed request carries the recorded
    system prompt, the CLI re-announces nothing, and the new session's
    estimate and gauge are within a few % of what the CLI sends."""
    from realcli.fake_api import system_text
    f = _copy(env, src)
    base = resume(f, "ping", workdir=tmp_path / "base")
    rep = json.loads(run("compact", f, "--before", before, "--json").output)
    assert rep["result"]["kept_state"] >= 4
    new = Path(rep["target"])
    r = resume(new, "ping", workdir=tmp_path / "new", siblings=[f])
    assert r.loaded and not r.compacted, r.summary()
    # the system prompt as recorded (its snapshot), not one rebuilt for the scratch folder
    assert system_text(r.main_request).splitlines()[1:] == system_text(base.main_request).splitlines()[1:]
    # announced once, before the kept part, not again at the ping
    tail = json.dumps(r.messages[-1], ensure_ascii=False)
    assert "deferred tools are now available" not in tail
    sent = _context_before_ping(r)
    run("refresh")
    row = json.loads(run("query", "select gauge_tokens, est_context_tokens from session_costs where session_id = "
                                  f"'{new.stem}'", "--json").output)[0]
    for figure in (rep["tokens_after"], row["est_context_tokens"], row["gauge_tokens"]):
        assert abs(figure - sent) <= 0.05 * sent, (figure, sent)


def _text(m: dict) -> str:
    c = m["content"]
    return c if isinstance(c, str) else "\n".join(b.get("text", "") for b in c if isinstance(b, dict))


def _sans_thinking(msgs: list[dict]) -> list[dict]:
    return [dict(m, content=[b for b in m["content"] if b.get("type") != "thinking"])
            if isinstance(m["content"], list) else m for m in msgs]


def test_undo_resumes_exactly_as_before(resume, env, tmp_path):
    f = _copy(env, TOOL_IMAGES)
    original = f.read_bytes()
    base = resume(f, "ping", workdir=tmp_path / "base")
    run("strip-all", f, "--apply")
    stripped = resume(f, "ping", workdir=tmp_path / "stripped")
    assert stripped.messages_chars < base.messages_chars
    run("undo", f)
    r = resume(f, "ping", workdir=tmp_path / "undone")
    assert r.loaded and not r.compacted, r.summary()
    assert f.read_bytes() == original
    assert r.user_assistant_messages() == base.user_assistant_messages()   # (system entries name the scratch dir)
