"""compact-range judged by the real Claude Code CLI (2.1.328, offline, loopback fake API).

After compact-range + apply, ``claude --resume`` loads without compacting; its
request holds the summary in a user message, every message outside the
range in the order it had, and nothing from inside the range; the saved
files hold the original records byte for byte, and the model's Read of one
returns it. An older survivor kept in a system envelope is not sent at all;
after ``--pos 0`` it is."""

from __future__ import annotations

import json
import shutil
import sys
from functools import partial
from pathlib import Path

import pytest

from conftest import run as txdb
from txdb.surgery.ops import tool_spans
from txdb.model.transcript import Transcript

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realcli.fake_api import read, text  # noqa: E402
from realcli.oracle import read_back, resume  # noqa: E402

pytestmark = pytest.mark.realcli

DATA = Path(__file__).parent / "data"
TOOLS_DEMO = next((DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo").glob("*.jsonl"))
REAL = DATA / "projects" / "-experiments-worktrees" / "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"
SUMMARY = "Closed chapter: the agent listed the project and wrote out.txt (summary-7f3a)"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    return tmp_path


run = partial(txdb, ok=True)


def _copy(env, src: Path) -> Path:
    d = env / "claude" / "projects" / src.parent.name
    d.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copyfile(src, d / src.name))


def _range(t: Transcript, start: int, most: int) -> tuple[int, int] | None:
    """The longest range from ``start`` (at most ``most`` positions, ending before
    the last user prompt) that cuts no tool call."""
    spans = tool_spans(t)
    last_prompt = max(r.pos for r in t.chain if r.type == "user" and isinstance(r.content, str))
    best = None
    for b in range(start + 1, min(start + most, last_prompt)):
        if all((start <= u and r <= b) or r < start or u > b for u, r, _ in spans):
            best = b
    return (start, best) if best is not None else None


def _atoms(rec) -> list[str]:
    """What of a record the API request must show verbatim: tool ids, the start
    of its text (a user prompt, an assistant's text block)."""
    o = rec.parse()
    if rec.type not in ("user", "assistant") or o.get("isMeta"):
        return []
    content = o["message"].get("content")
    if isinstance(content, str):
        return [content[:60]] if content.strip() and not content.startswith("<") else []
    out = []
    for b in content or ():
        if not isinstance(b, dict):
            continue
        if b.get("type") == "tool_use":
            out.append(b["id"])
        elif b.get("type") == "tool_result":
            out.append(b["tool_use_id"])
        elif b.get("type") == "text" and b.get("text", "").strip() and not b["text"].startswith("<"):
            out.append(b["text"][:60])
    return out


def _where(sent: list[str], atom: str) -> tuple[int, int] | None:
    needle = json.dumps(atom, ensure_ascii=False)[1:-1]
    for i, m in enumerate(sent):
        at = m.find(needle)
        if at >= 0:
            return i, at
    return None


CASES = [("tools-demo", 0), ("tools-demo", "mid"), ("real", 0), ("real", "mid")]  # real: position 0 is an attachment


@pytest.mark.parametrize("source,start", CASES, ids=[f"{s}-from-{a}" for s, a in CASES])
def test_resume_sends_the_summary_and_everything_outside_the_range(env, tmp_path, source, start):
    f = _copy(env, {"tools-demo": TOOLS_DEMO, "real": REAL}[source])
    original = Transcript.load(f)
    most = len(original.chain) // 2
    if start == "mid":  # the first place past a quarter of the chain where a range can start
        a, b = next(x for p in range(len(original.chain) // 4, len(original.chain))
                    if (x := _range(original, p, most)) is not None)
    else:
        a, b = _range(original, start, most)
    base = resume(f, "ping", workdir=tmp_path / "base")
    assert base.loaded and not base.compacted, base.summary()
    rep = json.loads(run("compact-range", f, "--from", a, "--to", b, "--summary", SUMMARY, "--json").output)
    rng = rep["result"]["ranges"][0]
    assert rng["status"] == "compacted"
    # the saved files hold the original records, byte for byte
    raw = {r.uuid: bytes(r.raw) for r in original.chain}
    saved = {json.loads(Path(p).read_bytes())["uuid"]: Path(p).read_bytes() for p in rng["files"]}
    assert saved and all(raw[u] == data for u, data in saved.items())
    run("apply", f)
    # a short saved record for the model to Read back through the CLI
    target = min(rng["files"], key=lambda p: Path(p).stat().st_size)
    r = resume(f, "ping", workdir=tmp_path / "after", script=[read(target), text("ok")])
    assert r.loaded and not r.compacted, r.summary()
    first = r.requests[0]["messages"]
    sent = [json.dumps(m, ensure_ascii=False) for m in first]
    # the summary, in a user message
    holder = [m for m, s in zip(first, sent) if f'persisted-range from=\\"{a}\\" to=\\"{b}\\"' in s]
    assert len(holder) == 1 and holder[0]["role"] == "user" and SUMMARY in sent[first.index(holder[0])]
    # nothing from inside the range; everything outside it, in its order
    inside = {x for u in saved for x in _atoms(original.by_uuid[u])}
    outside = [x for rec in original.chain if rec.uuid not in saved for x in _atoms(rec)]
    inside -= set(outside)
    assert inside, "the range must hold something the request would show"
    marker = json.dumps(Transcript.load(f).by_uuid[rng["uuid"]].parse()["message"]["content"],
                        ensure_ascii=False)[1:-1]
    assert not [x for x in inside if _where([m.replace(marker, "") for m in sent], x)]  # (the preview shows some)
    was = [m for m in (json.dumps(m, ensure_ascii=False) for m in base.requests[0]["messages"])]
    pairs = sorted((_where(was, x), _where(sent, x)) for x in outside if _where(was, x))
    places = [now for _before, now in pairs]
    assert pairs and None not in places and places == sorted(places)
    assert len(r.user_assistant_messages()) < len(base.user_assistant_messages())
    # the model's Read of a saved file returns the original record
    last = r.requests[-1]["messages"][-1]
    results = [x for x in last["content"] if isinstance(x, dict) and x.get("type") == "tool_result"]
    assert results and not results[0].get("is_error"), results
    assert read_back(results[0]).rstrip("\n") == Path(target).read_text()


def test_an_old_survivor_in_a_system_envelope_is_sent_once_converted(env, tmp_path):
    """What older tools wrote for a range from 0: the first record's system
    envelope around the marker, which the CLI never sends to the model."""
    f = _copy(env, TOOLS_DEMO)
    t = Transcript.load(f)
    a, b = _range(t, 0, most=len(t.chain) // 2)
    first = t.chain[a].parse()
    marker = (f'<persisted-range from="{a}" to="{b}" count="{b - a + 1}">\nSaved to: gone (1 files)\n'
              f"Summary: {SUMMARY}\n\nPreview:\n[user] ...\n</persisted-range>")
    old = {"parentUuid": None, "isSidechain": False, "type": "system", "subtype": "informational",
           "content": marker, "isMeta": False, "timestamp": first["timestamp"], "uuid": first["uuid"],
           "level": "info", "cwd": first["cwd"], "sessionId": first["sessionId"], "version": first["version"]}
    t.touch(t.chain[a], old)
    t.remove(t.chain[a + 1:b + 1])
    f.write_bytes(t.to_bytes())
    before = resume(f, "ping", workdir=tmp_path / "before")
    assert before.loaded and SUMMARY not in before.messages_text()      # invisible to the model
    run("compact-range", f, "--pos", 0, "--apply")
    line = Transcript.load(f).by_uuid[first["uuid"]].parse()
    assert line["type"] == "user" and line["message"] == {"role": "user", "content": marker}
    after = resume(f, "ping", workdir=tmp_path / "after")
    assert after.loaded and not after.compacted, after.summary()
    assert after.requests[0]["messages"][0]["role"] == "user" and SUMMARY in after.messages_text()
