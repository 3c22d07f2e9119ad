"""How much work one surgery pass does (issue 19, speed): the steps rescue
runs read each record for its size once, whichever transcripts they size.
Real session copies in tmp_path. (The time it takes is measured by
bench/bench_peer.py, never here.)"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sessions import shipped_sessions
from txdb.model import records
from txdb.surgery import ops
from txdb.surgery.engine import run_surgery
from txdb.surgery.persist import PersistOp, Selection
from txdb.surgery.usage import context_estimator, result_estimator
from txdb.model.transcript import Record, Transcript


def _largest_real() -> Path:
    return max(shipped_sessions("real"), key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("command", ["persist-tools", "strip-all"])
def test_a_pass_sizes_each_record_once(tmp_path, monkeypatch, command):
    """A pass sizes the original (its calibration) and the copy (the report,
    the usage reset): a record the op left alone is sized once, not once per
    transcript, and the figures are the same as a fresh load's."""
    src = _largest_real()
    proj = tmp_path / "-proj"
    proj.mkdir()
    path = proj / src.name
    shutil.copyfile(src, path)
    sized: list[int] = []
    real = records.record_tokens

    def counted(obj, *args, **kw):
        sized.append(1)
        return real(obj, *args, **kw)
    monkeypatch.setattr(ops, "record_tokens", counted)
    op = PersistOp(Selection(kinds=("tool",), keep_recent=3)) if command == "persist-tools" \
        else (lambda t, o: ops.strip_all(t))
    rep = run_surgery(path, command, op)
    assert rep.written and rep.changed_lines > 0
    chain = len(Transcript.load(src).chain)
    # every chain record once, and once more each one the pass rewrote
    assert len(sized) <= chain + rep.changed_lines
    monkeypatch.setattr(ops, "record_tokens", real)
    # the sizes the copy carried over are those of its bytes: the report's
    # figure is the one a fresh load of the pending copy gives
    fresh = Transcript.load(path.with_name(path.name + ".pending"))
    assert rep.tokens_after == result_estimator(context_estimator(Transcript.load(src)))(fresh)(fresh)


def test_persist_reads_only_the_messages(tmp_path, monkeypatch):
    """persist-tools looks for blocks in user and assistant messages only: the
    other records (progress, attachments, api-request and the like: most of a
    long session's lines) are passed over by their type, never parsed."""
    src = max(shipped_sessions("generated"), key=lambda p: p.stat().st_size)  # the CLI's own kinds of line
    proj = tmp_path / "-proj"
    proj.mkdir()
    path = proj / src.name
    shutil.copyfile(src, path)
    t = Transcript.load(path)
    assert sum(1 for r in t.live() if r.type not in ("user", "assistant")) > 0
    parsed: list[str | None] = []
    real = Record.parse

    def parse(self):
        parsed.append(self.type)
        return real(self)
    monkeypatch.setattr(Record, "parse", parse)
    op = PersistOp(Selection(kinds=("tool",), keep_recent=3))
    op.plan_files(tmp_path / "sdir")
    out = op(t, t)
    assert out["persisted"]["tool"] > 0
    assert [x for x in parsed if x not in ("user", "assistant")] == []


@pytest.mark.parametrize("command", ["persist-tools", "strip-thinking"])
def test_a_pass_reads_each_records_thinking_once(tmp_path, monkeypatch, command):
    """The thinking on the chain (what the CLI leaves out on another model) is
    counted by the calibration, the usage reset and the report alike: a
    record's figure is read once per bytes, not once per use (seven uses a
    pass), and the report's figure is a fresh load's."""
    src = max((p for p in shipped_sessions("generated")
               if any(r.type == "assistant" and b'"thinking"' in r.raw for r in Transcript.load(p).chain)),
              key=lambda p: p.stat().st_size)
    proj = tmp_path / "-proj"
    proj.mkdir()
    path = proj / src.name
    shutil.copyfile(src, path)
    counted: list[int] = []
    real = records.thinking_tokens

    def count(obj):
        counted.append(1)
        return real(obj)
    monkeypatch.setattr(records, "thinking_tokens", count)
    op = PersistOp(Selection(kinds=("tool",), keep_recent=3)) if command == "persist-tools" \
        else (lambda t, o: ops.strip_thinking(t))
    rep = run_surgery(path, command, op)
    assert rep.written and rep.changed_lines > 0
    holding = sum(1 for r in Transcript.load(src).chain if r.type == "assistant" and b"thinking" in r.raw)
    assert 0 < len(counted) <= holding + rep.changed_lines
    monkeypatch.setattr(records, "thinking_tokens", real)
    fresh = Transcript.load(path.with_name(path.name + ".pending"))
    assert rep.tokens_after == result_estimator(context_estimator(Transcript.load(src)))(fresh)(fresh)


@pytest.mark.parametrize("command", ["persist-tools", "strip-all"])
def test_a_pass_parses_an_untouched_turn_twice_at_most(tmp_path, monkeypatch, command):
    """An assistant turn the pass leaves alone is parsed once for its size,
    thinking and recorded usage together (``ops.recorded_context``, carried
    to the copy like the size) and once by the op: the calibration, the
    stale-turn check and the usage reset read the kept figure (they parsed
    every turn five times more), and the report is a fresh load's."""
    src = _largest_real()
    proj = tmp_path / "-proj"
    proj.mkdir()
    path = proj / src.name
    shutil.copyfile(src, path)
    parsed: dict[int, int] = {}
    real = Record.parse

    def parse(self):
        if self.type == "assistant":
            parsed[self.offset] = parsed.get(self.offset, 0) + 1
        return real(self)
    monkeypatch.setattr(Record, "parse", parse)
    op = PersistOp(Selection(kinds=("tool",), keep_recent=3)) if command == "persist-tools" \
        else (lambda t, o: ops.strip_all(t))
    rep = run_surgery(path, command, op)
    monkeypatch.setattr(Record, "parse", real)
    assert rep.written and rep.changed_lines > 0
    pending = Transcript.load(path.with_name(path.name + ".pending"))
    before = Transcript.load(src)
    kept = [r.offset for r in before.chain if r.type == "assistant" and r.uuid
            and (p := pending.by_uuid.get(r.uuid)) is not None and p.raw == r.raw]
    assert len(kept) > 100
    assert max(parsed.get(o, 0) for o in kept) <= 2
    assert rep.usage["turns"] > 0 and rep.usage["last_before"] is not None
    assert rep.tokens_after == result_estimator(context_estimator(before))(pending)(pending)


# What a pass on one session (no --where, no --apply, no --fork) never needs:
# the ingest store (it reads the file, never indexes it), the --where
# selection (its ops, small, load with the declarations), the surgeries log, verify (apply's check), a
# thread pool library (durability starts its own fsync threads), tempfile
# and shutil (durability names its own temp files).
_NOT_IN_A_PASS = ("txdb.catalog.ingest.store", "txdb.catalog.ingest.rows", "txdb.catalog.ingest.sha", "txdb.surgery.select",
                  "txdb.surgery.log", "txdb.surgery.images", "txdb.model.verify",
                  "concurrent.futures", "ctypes", "tempfile", "shutil")


def _closed_span_end(t: Transcript) -> int:
    """The position before the last user prompt (text, not a tool result): 0..it splits no tool call."""
    def prompt(c) -> bool:
        return isinstance(c, str) or (isinstance(c, list) and all(b.get("type") == "text" for b in c))
    return max(r.pos for r in t.chain if r.type == "user" and r.pos > 2 and prompt(r.content)) - 1


@pytest.mark.parametrize("args", [["persist-tools", "--keep-recent", "3", "--min-chars", "0"],
                                  ["compact-range", "--from", "0", "--to", "END"]])
def test_a_pass_loads_only_what_it_uses(tmp_path, args):
    """Start-up is most of a pass on a real 2-4 MB session (issue 19: the
    peer's whole run takes 90-200 ms): the pass writes its pending copy and
    sidecars (fsynced from threads) without loading those modules."""
    import subprocess
    import sys

    src = _largest_real()
    proj = tmp_path / "-proj"
    proj.mkdir()
    path = proj / src.name
    shutil.copyfile(src, path)
    args = [str(_closed_span_end(Transcript.load(src))) if a == "END" else a for a in args]
    code = ("import sys\n"
            "from txdb.cli import cli\n"
            f"cli.main([{args[0]!r}, {str(path)!r}, *{args[1:]!r}, '--db', {str(tmp_path / 'c.db')!r}],"
            " standalone_mode=False)\n"
            f"print(sorted(m for m in sys.modules if m.startswith({_NOT_IN_A_PASS!r})))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Pending copy:" in r.stdout
    assert r.stdout.splitlines()[-1] == "[]"
    pending = Transcript.load(path.with_name(path.name + ".pending"))
    assert len(pending.chain) < len(Transcript.load(src).chain) or b"<persisted-output>" in pending.data


def test_a_pass_sizes_the_chain_from_the_loads_own_parse(tmp_path, monkeypatch):
    """The session is parsed once as it loads, and each chain record's size,
    thinking and recorded usage are read from that parse or, for a message,
    from the one ``chain_opens`` makes (``ops.measure_at_load``, ``ops.measure``):
    a record persist-tools never looks into (attachments, system lines) is
    not parsed again during the pass (one that mentions thinking may be:
    the preserved-thinking check reads it), and the figures are a fresh
    load's."""
    src = max(shipped_sessions("generated"), key=lambda p: p.stat().st_size)  # the CLI's own kinds of line
    proj = tmp_path / "-proj"
    proj.mkdir()
    path = proj / src.name
    shutil.copyfile(src, path)
    before = Transcript.load(src)
    others = {r.offset for r in before.chain if r.type not in ("user", "assistant") and b"think" not in r.raw}
    assert len(others) > 5
    parsed: list[int] = []
    real = Record.parse

    def parse(self):
        parsed.append(self.offset)
        return real(self)
    monkeypatch.setattr(Record, "parse", parse)
    rep = run_surgery(path, "persist-tools", PersistOp(Selection(kinds=("tool",), keep_recent=3)))
    monkeypatch.setattr(Record, "parse", real)
    assert rep.written and rep.changed_lines > 0
    assert [o for o in parsed if o in others] == []
    pending = Transcript.load(path.with_name(path.name + ".pending"))
    assert rep.tokens_before == context_estimator(before)(before)
    assert rep.tokens_after == result_estimator(context_estimator(before))(pending)(pending)


def _tool_results(t: Transcript):
    for r in t.chain:
        if r.type != "user":
            continue
        c = r.parse().get("message", {}).get("content")
        if isinstance(c, list):
            for idx, b in enumerate(c):
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    yield r, idx, b


def test_persist_plans_files_only_for_results_a_marker_can_shrink(tmp_path, monkeypatch):
    """A short tool result (a string or one text block the marker's preview
    would hold whole) is never moved: persist-tools decides so without
    planning a sidecar for it or building its marker (most results of a
    long session are short; the pass planned one for every result, twice
    with --keep-recent). The same results move as when every one is tried,
    and each short one's marker really is larger."""
    from txdb.model import sidecar as sc
    from txdb.surgery import persist

    src = _largest_real()
    t = Transcript.load(src)
    results = list(_tool_results(t))
    short = [(r, idx, b) for r, idx, b in results
             if (isinstance(b.get("content"), str) and len(b["content"]) <= sc.TOOL_PREVIEW_CHARS)
             or (isinstance(b.get("content"), list) and len(b["content"]) == 1
                 and b["content"][0].get("type") == "text" and len(b["content"][0]["text"]) <= sc.TOOL_PREVIEW_CHARS)]
    assert len(short) > 20
    for r, idx, b in short:  # the rule behind the shortcut, checked with the shortest path a marker can name
        text = persist._result_text(b.get("content"))
        path = tmp_path / "s" / sc.relative_path("tool", b["tool_use_id"])
        new = dict(b, content=sc.tool_marker(path, len(text.encode()), text, None))
        assert len(persist.dumps(new)) > len(persist.dumps(b))
    proj = tmp_path / "-proj"
    proj.mkdir()
    path = proj / src.name
    shutil.copyfile(src, path)
    planned: list[str] = []
    real = sc.Writes.plan

    def plan(self, rel, data):
        planned.append(rel)
        return real(self, rel, data)
    monkeypatch.setattr(sc.Writes, "plan", plan)
    rep = run_surgery(path, "persist-tools", PersistOp(Selection(kinds=("tool",), keep_recent=3)))
    monkeypatch.setattr(sc.Writes, "plan", real)
    assert rep.written
    assert 0 < len(planned) <= 2 * (len(results) - len(short))
    assert not {sc.relative_path("tool", b["tool_use_id"]) for _r, _i, b in short} & set(planned)
    # every result tried the long way: the same pending copy, the same files
    slow = tmp_path / "-slow"
    slow.mkdir()
    shutil.copyfile(src, slow / src.name)
    monkeypatch.setattr(persist, "_marker_is_larger", lambda obj, tg, text: False)
    rep2 = run_surgery(slow / src.name, "persist-tools", PersistOp(Selection(kinds=("tool",), keep_recent=3)))
    assert rep2.result["persisted"] == rep.result["persisted"]
    assert [f["tool_use_id"] for f in rep2.result["files"]] == [f["tool_use_id"] for f in rep.result["files"]]
    assert rep2.tokens_after == rep.tokens_after and rep2.bytes_after == rep.bytes_after
