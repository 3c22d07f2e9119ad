"""The persist family judged by the real Claude Code CLI (2.1.328, offline, loopback fake API).

For each command on a CLI-made session, a shipped CLI fixture and a shipped
real session: after apply, ``claude --resume`` loads without compacting,
sends the same messages in the same order, and the request holds the
markers instead of the originals; a scripted turn then makes the model
Read a marker's path, and what the CLI reads back is the original block,
byte for byte. No recorded usage goes up.

Also: the tool marker is exactly Claude Code's own shape (the CLI persists a
big Bash output itself; ``sidecar.tool_marker`` on the same file gives the
same string)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import orjson
import pytest

from txdb.surgery import pending as pend
from txdb.surgery import persist as per
from txdb.model import sidecar as sc
from txdb.surgery.engine import PassOptions, run_surgery
from txdb.model.transcript import Transcript

sys.path.insert(0, str(Path(__file__).resolve().parent))
from realcli import claude_binary  # noqa: E402
from realcli.driver import Sandbox  # noqa: E402
from realcli.fake_api import FakeAPI, bash, read, text, thinking  # noqa: E402
from realcli.oracle import read_back, resume  # noqa: E402

pytestmark = pytest.mark.realcli

DATA = Path(__file__).parent / "data"
TOOLS_DEMO = next((DATA / "cli" / "-tmp-txdb-cli-fixtures-tools-demo").glob("*.jsonl"))
REAL = DATA / "projects" / "-experiments-worktrees" / "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"
LONG_TEXT = "\n".join(f"Finding {i}: the parser handles case {i} by falling back to the slow path." for i in range(60))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    """One CLI run: a thinking turn with a mid-size Bash output (not persisted by the CLI
    itself), a long text answer, then a huge Bash output the CLI persists natively."""
    root = tmp_path_factory.mktemp("made")
    with Sandbox(claude_binary(), root, FakeAPI([])) as sb:
        sb.script(thinking("\n".join(f"Step {i}: list the numbers, then summarise them for the user."
                                      for i in range(40))) + bash("seq 1 1500"),
                  text(LONG_TEXT),
                  bash("seq 1 40000"), text("done"))
        first = sb.run("count for me").check()
        sb.run("now a lot", resume=first.session_id).check()
        f = sb.session_file(first.session_id)
        out = root / "sessions"
        out.mkdir()
        dest = out / f.name
        shutil.copyfile(f, dest)
        if (f.parent / first.session_id).is_dir():
            shutil.copytree(f.parent / first.session_id, out / first.session_id)
    return {"file": dest}


def test_tool_marker_is_claude_codes_own_shape(made):
    hits = 0
    for o in map(orjson.loads, made["file"].read_bytes().splitlines()):
        res = o.get("toolUseResult")
        if not isinstance(res, dict) or "persistedOutputPath" not in res:
            continue
        block = next(b for b in o["message"]["content"] if b.get("type") == "tool_result")
        p = made["file"].parent / o["sessionId"] / "tool-results" / Path(res["persistedOutputPath"]).name
        native = block["content"]
        ours = sc.tool_marker(Path(res["persistedOutputPath"]), p.stat().st_size, p.read_text(), None)
        assert ours == native
        assert sc.is_marker(native) and sc.marker_paths(native) == [res["persistedOutputPath"]]
        hits += 1
    assert hits == 1


def _baseline(src: Path, tmp_path_factory, cache={}):
    if src not in cache:
        cache[src] = resume(src, "ping", workdir=tmp_path_factory.mktemp("base"))
    return cache[src]


def _original_block(t: Transcript, f: dict) -> str:
    rec = t.by_uuid[f["uuid"]]
    obj = rec.parse()
    content = obj["message"]["content"]
    if f["kind"] == "message":
        return orjson.dumps(content).decode()
    if f["kind"] == "tool":
        b = next(b for b in content if isinstance(b, dict) and b.get("tool_use_id") == f["tool_use_id"])
        return per._result_text(b["content"])
    if f["kind"] == "thinking":
        return next(b["thinking"] for b in content if isinstance(b, dict) and b.get("type") == "thinking")
    if isinstance(content, str):
        return content
    idx = int(Path(f["path"]).stem.rsplit("_", 1)[1])
    return content[idx]["text"]


def _usage(path: Path) -> dict:
    out = {}
    for o in map(orjson.loads, path.read_bytes().splitlines()):
        u = (o.get("message") or {}).get("usage") if isinstance(o.get("message"), dict) else None
        if isinstance(u, dict) and o.get("uuid"):
            out[o["uuid"]] = {k: v for k, v in u.items() if isinstance(v, int)}
    return out


def _summaries_file(tmp_path: Path, f: Path, sel) -> Path:
    """Summaries for the first blocks the pass will move (a dry run says which), plus one
    key that matches nothing. The dry run gives every block a summary at least as long,
    since a summary lengthens the marker: a block just above the size where a marker no
    longer saves anything (the sidecar's path, so tmp_path's length, counts) is moved
    without one and stays with one."""
    longest = per.Summaries(default="summary of " + "x" * 64)
    dry = run_surgery(f, "persist-range", per.PersistOp(sel, longest), PassOptions(dry_run=True))
    table = {}
    for x in dry.result["files"][:3]:
        key = x["tool_use_id"] or f"pos:{x['pos']}"
        table[key] = f"summary of {key}"
    table["msg:no-such-message"] = "nothing"
    p = tmp_path / "summaries.json"
    p.write_text(json.dumps(table))
    return p


CASES = [
    ("made", "persist-tools"), ("made", "persist-thinkings"), ("made", "persist-texts"),
    ("made", "persist-message"), ("made", "persist-range"),
    ("tools-demo", "persist-message"), ("real", "persist-tools"), ("real", "persist-range"),
]


@pytest.mark.parametrize("source,command", CASES, ids=[f"{s}-{c}" for s, c in CASES])
def test_resume_sends_markers_and_read_returns_the_original(made, tmp_path, tmp_path_factory, source, command):
    src = {"made": made["file"], "tools-demo": TOOLS_DEMO, "real": REAL}[source]
    base = _baseline(src, tmp_path_factory)
    assert base.loaded and not base.compacted, base.summary()
    d = tmp_path / "proj"
    d.mkdir()
    f = d / src.name
    shutil.copyfile(src, f)
    original = Transcript.load(f)
    usage_before = _usage(f)
    if command == "persist-tools":
        sel = per.Selection(kinds=("tool",))
    elif command == "persist-thinkings":
        sel = per.Selection(kinds=("thinking",))
    elif command == "persist-texts":
        sel = per.Selection(kinds=("text",), min_chars=per.DEFAULT_TEXT_MIN_CHARS)
    elif command == "persist-message":
        pos = next(r.pos for r in original.chain if r.type == "assistant" and any(
            isinstance(b, dict) and b.get("type") == "tool_use" for b in r.parse()["message"]["content"]))
        sel = per.Selection(message_pos=pos)
    else:
        sel = per.Selection(kinds=per.KINDS, positions=(0, len(original.chain) - 2))
    summaries = per.Summaries(per.load_summaries(_summaries_file(tmp_path, f, sel))) \
        if command == "persist-range" else None
    op = per.PersistOp(sel, summaries)
    rep = run_surgery(f, command, op)
    assert rep.written, rep.result
    files = rep.result["files"]
    assert files
    if summaries is not None:
        given = {k: v for k, v in summaries.table.items() if k != "msg:no-such-message"}
        assert given
        assert {x["tool_use_id"] or f"pos:{x['pos']}": x["summary"] for x in files if x["summary"]} == given
        assert [u["key"] for u in rep.result["summaries_unused"]] == ["msg:no-such-message"]
    pend.apply(f, settle=0.0)
    # what to Read: a moved block whose lines the Read tool returns whole
    target = next(x for x in files if all(len(ln) < 1900 for ln in _original_block(original, x).split("\n"))
                  and x["chars"] < 100_000)
    want = _original_block(original, target)
    marker_path = next(p for p in sc.referenced(f.read_bytes()) if p == target["path"])
    r = resume(f, "ping", workdir=tmp_path / "run", script=[read(marker_path), text("ok")])
    assert r.loaded, r.summary()
    assert not r.compacted, r.summary()
    # every message it sent before, in the same order
    roles = [m["role"] for m in r.user_assistant_messages()]
    assert roles == [m["role"] for m in base.user_assistant_messages()], (r.summary(), base.summary())
    sent = json.dumps(r.requests[0]["messages"], ensure_ascii=False)
    assert "Full output saved to: " in sent or "<persisted-" in sent
    assert json.dumps(target["path"])[1:-1] in sent
    if len(want) > 3000:
        assert json.dumps(want[-800:])[1:-1] not in sent  # the original's tail is no longer sent
    # the model's Read of the marker's path: the CLI reads the sidecar
    last = r.requests[-1]["messages"][-1]
    results = [b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert results and not results[0].get("is_error"), results
    assert read_back(results[0]).rstrip("\n") == want.rstrip("\n")
    assert Path(marker_path).read_bytes() == want.encode()  # the sidecar itself, byte for byte
    # no recorded usage goes up
    after = _usage(f)
    for uid, u in after.items():
        for k, v in u.items():
            if uid in usage_before and k in usage_before[uid]:
                assert v <= usage_before[uid][k], (uid, k)
