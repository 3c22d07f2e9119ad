"""The transcript model and each operation's semantics, on real files in tmp_path."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from markup import escape_markup, strip_ansi, unescape_markup

from txdb.errors import SurgeryError
from txdb.surgery import ops
from txdb.surgery import pending as pend
from txdb.surgery.engine import PassOptions, run_surgery
from txdb.surgery.thinking import dropped_thinking, model_binds_thinking
from txdb.model.transcript import Transcript
from txdb.catalog.estimate import context_sum
from txdb.surgery.usage import cap_usage, gauge_context

DATA = Path(__file__).parent / "data"
EDGE = DATA / "surgery" / "edge.jsonl"
REAL = DATA / "projects" / "-experiments-worktrees" / "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


def _copy(tmp_path: Path, src: Path = EDGE) -> Path:
    f = tmp_path / src.name
    shutil.copyfile(src, f)
    return f


def _objs(data: bytes) -> list[dict]:
    return [orjson.loads(x) for x in data.splitlines() if x.strip()]


def _by_uuid(data: bytes) -> dict[str, dict]:
    return {o["uuid"]: o for o in _objs(data) if o.get("uuid")}


# -- model -------------------------------------------------------------------

def test_lossless_edge_cases():
    raw = (b'{"type":"user","uuid":"a","parentUuid":null,"message":{"role":"user","content":"hi"}}\r\n'
           b'not json at all\n'
           b'\n'
           b'{"type":"x"}{"type":"y"}\n'
           b'{"type":"assistant","uuid":"b","parentUuid":"a","message":{"role":"assistant","content":[]}}')
    t = Transcript.from_bytes(raw)
    assert t.to_bytes() == raw
    assert len(t.records) == 4  # the glued pair splits into two records
    assert [r.uuid for r in t.chain] == ["a", "b"]
    # touching one record rewrites only its line
    rec = t.by_uuid["a"]
    rec.obj["message"]["content"] = "hello"
    t.touch(rec)
    out = t.to_bytes()
    assert out.endswith(raw[raw.index(b"not json"):])
    assert out.startswith(b'{"type":"user","uuid":"a","parentUuid":null,"message":{"role":"user","content":"hello"}}\r\n')


def test_remove_reparents_children_and_last_prompt():
    t = Transcript.load(EDGE)
    atts = [t.by_uuid[u] for u in ("a-att3", "a-att4")]
    assert t.remove(atts) == 2
    out = t.to_bytes()
    objs = _by_uuid(out)
    assert "a-att3" not in objs and "a-att4" not in objs
    assert objs["a-att5"]["parentUuid"] == "u-7"
    t2 = Transcript.from_bytes(out)
    assert [r.uuid for r in t2.chain][-1] == "u-12"
    # last-prompt pointing at a removed record follows it to the nearest survivor
    t3 = Transcript.load(EDGE)
    t3.remove([t3.by_uuid["u-10"]])
    lp = [o for o in _objs(t3.to_bytes()) if o.get("type") == "last-prompt"][0]
    assert lp["leafUuid"] == "u-9"
    summ = [o for o in _objs(t3.to_bytes()) if o.get("type") == "summary"][0]
    assert summ["leafUuid"] == "u-9"


def test_remove_refuses_leaf_and_tool_separation():
    from txdb.errors import SurgeryError
    t = Transcript.load(EDGE)
    with pytest.raises(SurgeryError):
        t.remove([t.leaf])
    with pytest.raises(SurgeryError, match="tool pair"):
        t.remove([t.by_uuid["u-3"]])


def test_written_lines_are_compact_and_file_mode(tmp_path):
    f = _copy(tmp_path)
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    p = pend.pending_path(f)
    assert p.stat().st_mode & 0o777 == 0o600
    for line in p.read_bytes().splitlines():
        obj = orjson.loads(line)
        if line not in EDGE.read_bytes():
            assert orjson.dumps(obj) == line
    assert b'{"parentUuid":' in p.read_bytes()


@given(st.lists(st.sampled_from(list("</\\>ab-") + ["</tag>", "<\\/tag>", "<\\\\/x>", "x"]),
                max_size=20).map("".join))
def test_markup_escape_is_bijective(s):
    e = escape_markup(s)
    assert re.search(r"</[A-Za-z]", e) is None  # no payload can close an envelope
    assert unescape_markup(e) == s


def test_strip_ansi():
    assert strip_ansi("\x1b[31mred\x1b[0m plain \x1b]0;title\x07") == "red plain "


# -- strip-tools ---------------------------------------------------------------

def test_strip_tools_results_inputs_errors(tmp_path):
    t = Transcript.load(EDGE)
    r = ops.strip_tools(t)
    objs = _by_uuid(t.to_bytes())
    res = objs["u-4"]["message"]["content"][0]["content"]
    assert res.startswith("[stripped by txdb:") and len(res) < 60
    assert objs["u-7"]["message"]["content"][0]["content"].startswith("Error: no such file")  # is_error kept
    inp = objs["u-3"]["message"]["content"][0]["input"]
    assert isinstance(inp, dict) and inp["description"] == "show" and inp["command"].startswith("[stripped")
    assert objs["u-6"]["message"]["content"][0]["input"] == {"file_path": "/tmp/a.py"}  # small: untouched
    assert r["results"] == 1 and r["inputs"] == 1 and r["kept_errors"] == 1
    # idempotent
    t2 = Transcript.from_bytes(t.to_bytes())
    assert ops.strip_tools(t2)["results"] == 0 and t2.changed_lines() == 0


def test_strip_tools_keep_last_lines_and_filters():
    t = Transcript.load(EDGE)
    ops.strip_tools(t, only_results=True, keep_last_lines=2)
    res = _by_uuid(t.to_bytes())["u-4"]["message"]["content"][0]["content"]
    assert res.splitlines()[1:] == ["line 198: " + "x" * 60, "line 199: " + "x" * 60]
    assert "last 2 of 200 lines kept" in res.splitlines()[0]
    t = Transcript.load(EDGE)
    assert ops.strip_tools(t, tools=["Read"])["results"] == 0
    t = Transcript.load(EDGE)
    assert ops.strip_tools(t, only_inputs=True)["results"] == 0
    t = Transcript.load(EDGE)
    assert ops.strip_tools(t, tool_use_ids={"toolu_2"})["results"] == 0  # only an error result there
    t = Transcript.load(EDGE)
    pos = t.position(t.by_uuid["u-4"])
    assert ops.strip_tools(t, positions=(pos + 1, None))["results"] == 0


def test_strip_tools_keeps_tool_reference_results():
    # Found by tests/test_acceptance_realcli.py on a real session: a ToolSearch
    # result of tool_reference blocks is what loads deferred tools; on resume
    # CLI 2.1.328 rebuilds the request's tool list from it. Stripping it made
    # the resumed request lose the tools it had loaded (Monitor, TaskStop,
    # SendMessage) and saved nothing.
    raw = (b'{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"load it"}}\n'
           b'{"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"id":"m1","role":"assistant",'
           b'"content":[{"type":"tool_use","id":"toolu_s","name":"ToolSearch",'
           b'"input":{"query":"select:Monitor","max_results":1}}]}}\n'
           b'{"type":"user","uuid":"u2","parentUuid":"a1","message":{"role":"user","content":[{"type":"tool_result",'
           b'"tool_use_id":"toolu_s","content":[{"type":"tool_reference","tool_name":"Monitor"}]}]}}\n'
           b'{"type":"assistant","uuid":"a2","parentUuid":"u2","message":{"id":"m2","role":"assistant",'
           b'"content":[{"type":"text","text":"ok"}]}}\n')
    for kw in ({}, {"only_results": True}, {"keep_last_lines": 1}, {"tool_use_ids": {"toolu_s"}}):
        t = Transcript.from_bytes(raw)
        assert ops.strip_tools(t, **kw)["results"] == 0, kw
        assert t.to_bytes() == raw, kw


# -- strip-thinking ------------------------------------------------------------

def test_strip_thinking_removes_blocks_wrapped_and_reparents():
    t = Transcript.load(EDGE)
    r = ops.strip_thinking(t)
    out = t.to_bytes()
    objs = _by_uuid(out)
    assert b'"type":"thinking"' not in out and b"<thinking>" not in out
    assert r["blocks"] == 4  # three thinking blocks + one wrapped
    for gone in ("u-2", "u-5", "u-8", "u-11"):
        assert gone not in objs
    assert objs["u-3"]["parentUuid"] == "a-att1"
    assert objs["u-12"]["parentUuid"] == "u-10"
    assert r["chars"] > 2000  # signatures count


def test_strip_thinking_front_range_is_safe_for_preserved_thinking():
    o = Transcript.load(EDGE)
    t = Transcript.load(EDGE)
    ops.strip_thinking(t, positions=(0, 5))
    t.refresh()
    assert dropped_thinking(o, t).count == 0


def test_preserved_thinking_reports_and_removes(tmp_path):
    f = _copy(tmp_path)
    rep = run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t, only_results=True))
    d = rep.dropped_thinking
    assert d["count"] == 3 and d["first_pos"] is not None and d["chars"] > 1000
    assert rep.dropped_thinking_removed == 3
    out = pend.pending_path(f).read_bytes()
    sent = b"".join(orjson.dumps(o.get("message")) for o in _objs(out))
    assert b"final thought" not in sent  # (saved to a sidecar, named where the CLI sends nothing)
    assert b"Let me think" in out  # before the edit: kept
    # --keep-dropped-thinking keeps them
    pend.pending_path(f).unlink()
    rep = run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t, only_results=True),
                      PassOptions(keep_dropped_thinking=True))
    assert rep.dropped_thinking["count"] == 3 and rep.dropped_thinking_removed == 0
    assert b"final thought" in pend.pending_path(f).read_bytes()


def test_preserved_thinking_silent_for_exempt_models(tmp_path):
    f = tmp_path / "old.jsonl"
    f.write_bytes(EDGE.read_bytes().replace(b"claude-opus-5-5", b"claude-opus-4-8"))
    rep = run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t, only_results=True))
    assert rep.dropped_thinking["count"] == 0
    assert not model_binds_thinking("claude-mythos-5-1")
    assert model_binds_thinking("claude-fable-5-1") and model_binds_thinking("claude-haiku-5-5-20270101")


# -- strip-attachments -----------------------------------------------------------

# EDGE's model (claude-opus-5-5) has no task tools, so its task_reminders
# render to nothing (policy.TASK_TOOL_MODELS): free, dropped with include_free.

def test_attachment_policy_keeps_newest_task_reminder():
    t = Transcript.load(EDGE)
    plan = {p["uuid"]: p for p in ops.attachment_plan(t, include_free=True)}
    assert plan["a-att1"]["action"] == "drop" and plan["a-att2"]["action"] == "drop"
    assert plan["a-att5"]["action"] == "keep"  # newest task_reminder
    assert plan["a-att4"]["action"] == "keep"  # queued_command: keep-all
    assert plan["a-att3"]["action"] == "keep"  # hook_success (newest, and free)
    assert ops.attachment_plan(Transcript.load(EDGE))[0]["reason"] == "free (renders to nothing)"
    r = ops.strip_attachments(t, include_free=True)
    assert r["removed"] == 2
    objs = _by_uuid(t.to_bytes())
    assert objs["u-2"]["parentUuid"] == "u-1" and objs["u-5"]["parentUuid"] == "u-4"


def test_attachment_flags():
    t = Transcript.load(EDGE)
    assert ops.strip_attachments(t, keep_recent=3)["removed"] == 0
    t = Transcript.load(EDGE)
    assert ops.strip_attachments(t, types=["queued_command"])["removed"] == 0
    t = Transcript.load(EDGE)
    assert ops.strip_attachments(t, types=["queued_command"], drop_all=True)["removed"] == 1
    with pytest.raises(ValueError):
        ops.attachment_plan(Transcript.load(EDGE), drop_all=True)
    t = Transcript.load(EDGE)
    assert ops.strip_attachments(t, uuids={"a-att2"}, include_free=True)["removed"] == 1
    rows = {r["type"]: r for r in ops.attachment_listing(ops.attachment_plan(Transcript.load(EDGE), include_free=True))}
    assert rows["task_reminder"]["count"] == 3 and rows["task_reminder"]["drop"] == 2


def test_attachment_policy_on_real_session():
    t = Transcript.load(REAL)
    plan = ops.attachment_plan(t)
    by_type: dict[str, list] = {}
    for p in plan:
        by_type.setdefault(p["type"], []).append(p)
    for typ in ("deferred_tools_delta", "hook_additional_context", "skill_listing"):
        assert all(p["action"] == "keep" for p in by_type.get(typ, []))
    hs = by_type.get("hook_success", [])
    assert all(p["action"] == "keep" for p in hs if p["free"])  # free: skipped by default
    dropped = {p["uuid"] for p in plan if p["action"] == "drop"}
    ops.strip_attachments(t)
    assert not dropped & {r.uuid for r in t.live()}


def test_task_reminders_in_real_corpus_session(tmp_path):
    src = CORPUS / "real" / "hannibal8856-claude_backup" / "-home-moxa-sdc1-home-moxa-mds4xgl3-buildroot-dl" / \
        "9f11783a-9bf6-44b6-bc6e-65aadfb575ee.jsonl"
    if not src.exists():
        pytest.skip("shared corpus not present")
    f = _copy(tmp_path, src)
    t = Transcript.load(f)
    reminders = [r for r in t.live() if (r.obj.get("attachment") or {}).get("type") == "task_reminder"]
    assert len(reminders) == 6
    rep = run_surgery(f, "strip-attachments", lambda t, o: ops.strip_attachments(t, types=["task_reminder"],
                                                                         include_free=True))
    assert rep.result["removed"] == 5  # free on its model (claude-opus-5): only with include_free
    after = Transcript.load(pend.pending_path(f))
    left = [r for r in after.live() if (r.obj.get("attachment") or {}).get("type") == "task_reminder"]
    assert [r.uuid for r in left] == [reminders[-1].uuid]
    gone = {r.uuid for r in t.live()} - {r.uuid for r in after.live()}
    assert gone == {r.uuid for r in reminders[:-1]}  # nothing else


# -- usage -----------------------------------------------------------------------

def test_cap_usage_only_lowers_and_stays_consistent():
    u = {"input_tokens": 10, "cache_read_input_tokens": 700, "cache_creation_input_tokens": 290,
         "cache_creation": {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 90},
         "iterations": [{"input_tokens": 10, "cache_read_input_tokens": 700, "cache_creation_input_tokens": 290}]}
    assert not cap_usage(dict(u), 5000)
    assert cap_usage(u, 400)
    assert context_sum(u) == 400 and gauge_context(u) == 400
    cc = u["cache_creation"]
    assert cc["ephemeral_5m_input_tokens"] + cc["ephemeral_1h_input_tokens"] <= u["cache_creation_input_tokens"]
    assert u["input_tokens"] <= 10 and u["cache_read_input_tokens"] <= 700


def test_reset_usage_after_strip_lowers_gauge_never_raises(tmp_path):
    from sessions import with_prompt_usage

    f = with_prompt_usage(EDGE, tmp_path / EDGE.name)
    rep = run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t))
    u = rep.usage
    assert u["capped"] > 0 and u["last_after"] < u["last_before"]
    assert u["factor"] is not None  # calibrated against recorded turns
    # a recorded 0 (blocked turn) is never raised
    g = tmp_path / "zero.jsonl"
    data = EDGE.read_bytes()
    objs = data.split(b"\n")
    last = orjson.loads(objs[-2].rstrip(b"\r"))
    assert last["uuid"] == "u-12"
    last["message"]["usage"] = {"input_tokens": 0, "output_tokens": 0}
    objs[-2] = orjson.dumps(last)
    g.write_bytes(b"\n".join(objs))
    run_surgery(g, "strip-all", lambda t, o: ops.strip_all(t))
    after = _by_uuid(pend.pending_path(g).read_bytes())
    assert after["u-12"]["message"]["usage"] == {"input_tokens": 0, "output_tokens": 0}


def test_no_usage_reset_leaves_usage(tmp_path):
    f = _copy(tmp_path)
    run_surgery(f, "strip-all", lambda t, o: ops.strip_all(t),
                PassOptions(usage_reset=False, keep_dropped_thinking=True))
    before, after = _by_uuid(EDGE.read_bytes()), _by_uuid(pend.pending_path(f).read_bytes())
    for u, o in after.items():
        if o.get("type") == "assistant":
            assert o["message"]["usage"] == before[u]["message"]["usage"]


def test_reset_usage_lowers_a_turn_by_the_calibrated_size_of_what_went(tmp_path):
    """Recorded usage grows 2 tokens per estimated token over a 12,000-token
    system prompt: after a strip, the last turn loses twice what went."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sessions import conversation, write

    objs = conversation(8)
    t0 = Transcript.from_bytes(b"\n".join(orjson.dumps(o) for o in objs) + b"\n")
    est = ops.chain_prefix_estimates(t0)
    for pos, rec in enumerate(t0.chain):
        if rec.obj["type"] == "assistant":
            rec.obj["message"]["usage"] = {"input_tokens": 12000 + 2 * est[pos], "output_tokens": 5}
    f = write(tmp_path / "p" / "s.jsonl", [r.obj for r in t0.chain])
    last_before = 12000 + 2 * est[len(t0.chain) - 1]
    rep = run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t, only_results=True),
                      PassOptions(keep_dropped_thinking=True))
    after = Transcript.load(pend.pending_path(f))
    removed = est[len(t0.chain) - 1] - ops.chain_prefix_estimates(after)[len(after.chain) - 1]
    assert removed > 0
    assert rep.usage["factor"] == pytest.approx(2.0)
    last = after.chain[-1].obj["message"]["usage"]
    assert context_sum(last) == last_before - 2 * removed


def _session_on(tmp_path: Path, model: str) -> Path:
    """A user prompt, a task_reminder, an auto_mode line and an answer by ``model``."""
    recs = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s", "message": {"role": "user", "content": "hi"}},
        {"type": "attachment", "uuid": "a1", "parentUuid": "u1", "sessionId": "s",
         "attachment": {"type": "task_reminder", "content": [], "itemCount": 0}},
        {"type": "attachment", "uuid": "a2", "parentUuid": "a1", "sessionId": "s",
         "attachment": {"type": "auto_mode", "reminderType": "sparse"}},
        {"type": "attachment", "uuid": "a3", "parentUuid": "a2", "sessionId": "s",
         "attachment": {"type": "command_permissions", "allowedTools": []}},
        {"type": "assistant", "uuid": "m1", "parentUuid": "a3", "sessionId": "s",
         "message": {"id": "msg1", "role": "assistant", "model": model, "content": [{"type": "text", "text": "ok"}]}},
    ]
    f = tmp_path / f"{model}.jsonl"
    f.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return f


def test_attachments_priced_as_the_cli_renders_them(tmp_path):
    # Measured with CLI 2.1.328 (tests/test_attachments_realcli.py): a
    # task_reminder is sent (~114 tokens with no task) only on a model with
    # the task tools; auto_mode is re-rendered as ~1,000 characters of
    # guidance whatever the line stores; command_permissions sends nothing.
    rows = {r["type"]: r for r in ops.attachment_listing(ops.attachment_plan(
        Transcript.load(_session_on(tmp_path, "claude-sonnet-4-6-20260101"))))}
    assert 100 <= rows["task_reminder"]["tokens"] <= 130 and not rows["task_reminder"]["free"]
    assert 230 <= rows["auto_mode"]["tokens"] <= 270
    assert rows["command_permissions"]["tokens"] == 0 and rows["command_permissions"]["free"] == 1
    rows = {r["type"]: r for r in ops.attachment_listing(ops.attachment_plan(
        Transcript.load(_session_on(tmp_path, "claude-opus-5"))))}
    assert rows["task_reminder"]["tokens"] == 0 and rows["task_reminder"]["free"] == 1


def test_an_op_declares_what_it_does_beside_the_edit(tmp_path):
    """Issue 18: the op protocol is declared (``ops.Op``): an op class overrides
    only the hooks it needs, a plain function is an op with the defaults, and
    ``t.base`` (what the op's positions are) is the engine's word, "original"
    on a transcript no pass made."""
    f = _copy(tmp_path)
    calls = []

    class Counting(ops.Op):
        def __call__(self, t, original):
            calls.append(("op", t.base))
            return ops.strip_all(t)

        def write_files(self, owner=None):
            calls.append(("write_files", pend.pending_path(f).exists()))
            return 0

    assert Transcript.load(f).base == "original"
    run_surgery(f, "strip-all", Counting(), PassOptions(dry_run=True))
    assert calls == [("op", "original")]  # a dry run writes no files
    rep = run_surgery(f, "strip-all", Counting())
    assert rep.written and calls[1:] == [("op", "original"), ("write_files", False)]  # before the copy
    plain = run_surgery(f, "strip-thinking", lambda t, _o: {"t": t.base}, PassOptions(dry_run=True))
    assert plain.result == {"t": "pending copy"}
    with pytest.raises(SurgeryError, match=r"--from 0 is after --to|past the end"):
        run_surgery(f, "strip-all", Counting(), PassOptions(positions=(0, 10_000)))


def test_the_cli_passes_every_option_of_a_pass(tmp_path):
    """The CLI's SurgeryOptions builds the library's one PassOptions: every
    field a pass takes comes from what the user asked, none left at its default."""
    import dataclasses

    from txdb.cli.surgery import SurgeryOptions

    o = SurgeryOptions("s", dry_run=True, fork=True, fork_title="T", usage_reset=False, keep_dropped_thinking=True,
                       arguments={"tools": ["Bash"]}, frm=2, to=5)
    got = o.pass_options()
    for f in dataclasses.fields(PassOptions):
        assert getattr(got, f.name) != getattr(PassOptions(), f.name), f.name
    assert got == PassOptions(dry_run=True, fork=True, fork_title="T", usage_reset=False, keep_dropped_thinking=True,
                              arguments={"tools": ["Bash"]}, positions=(2, 5))
