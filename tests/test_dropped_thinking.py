"""The thinking the API drops after an edit is saved, not destroyed
(surgery/thinking.py SavedThinking): its text in a sidecar, its marker in
the record's ``persistedThinking`` field, which the CLI never sends."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
from click.testing import CliRunner

from txdb.model import sidecar as sc
from txdb.cli import cli
from txdb.surgery import ops
from txdb.surgery import pending as pend
from txdb.surgery.engine import PassOptions, run_surgery
from txdb.model.transcript import Transcript

EDGE = Path(__file__).parent / "data" / "surgery" / "edge.jsonl"


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "claude" / "projects" / "-home-me-app"
    d.mkdir(parents=True)
    return Path(shutil.copyfile(EDGE, d / "11111111-2222-3333-4444-555555555555.jsonl"))


def _thinking_texts(data: bytes) -> list[str]:
    """Every readable thinking text: a thinking block's, a wrapped <thinking> text block's."""
    out = []
    for line in data.splitlines():
        o = orjson.loads(line)
        for b in ops.content_list(o) or ():
            if ops.is_thinking_block(b, ops.message_role(o)) and (b.get("thinking") or b.get("text")):
                out.append(b.get("thinking") or b["text"])
    return out


def test_dropped_thinking_goes_to_sidecars_the_record_names(tmp_path):
    f = _copy(tmp_path)
    before = _thinking_texts(f.read_bytes())
    rep = run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t, only_results=True))
    assert rep.dropped_thinking_removed == 3
    out = pend.pending_path(f).read_bytes()
    assert b"final thought" not in b"".join(ln for ln in out.splitlines() if b"persistedThinking" not in ln)
    kept = _thinking_texts(out)
    saved = {}
    for p in sc.referenced(out):
        assert Path(p).is_file(), p                     # a marker never names a missing file
        if "/persisted/thinking/" in p:
            saved[p] = Path(p).read_text()
    # every thinking text of the original: still in the copy, or in a sidecar a marker names
    for text in before:
        assert text in kept or text in saved.values(), text[:40]
    assert len(saved) == rep.dropped_thinking_saved["saved"] >= 1
    assert not sc.missing_referenced(out, f, None)
    # the markers are in a field the CLI does not send: the message contents carry none
    for line in out.splitlines():
        o = orjson.loads(line)
        assert b"persisted-thinking" not in orjson.dumps(o.get("message") or {})
    # the file's estimate does not count them
    t = Transcript.load(pend.pending_path(f))
    assert all(b"persistedThinking" not in r.raw or ops.record_estimate(r) < 200 for r in t.records
               if r.type == "assistant" and b"tool_use" not in r.raw)


def test_keep_dropped_thinking_saves_nothing(tmp_path):
    f = _copy(tmp_path)
    rep = run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t, only_results=True),
                      PassOptions(keep_dropped_thinking=True))
    assert rep.dropped_thinking_removed == 0 and not rep.dropped_thinking_saved
    assert not (f.parent / f.stem / "persisted").exists()


def test_a_dry_run_plans_the_files_and_writes_none(tmp_path):
    f = _copy(tmp_path)
    rep = run_surgery(f, "strip-tools", lambda t, o: ops.strip_tools(t, only_results=True), PassOptions(dry_run=True))
    assert rep.dropped_thinking_saved["saved"] >= 1
    assert not (f.parent / f.stem).exists() and not pend.pending_path(f).exists()


def test_show_thinking_lists_the_saved_thinking_after_apply(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    f = _copy(tmp_path)
    runner = CliRunner()
    r = runner.invoke(cli, ["strip-tools", str(f), "--only-results"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["apply", str(f)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["show-thinking", str(f), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rows = orjson.loads(r.output)["thinking"]
    saved = [x for x in rows if x["persisted"] and "/persisted/thinking/" in x["persisted"]["sidecar_path"]]
    assert len(saved) == 2  # the third has no text (a signature only): nothing to save
    for x in saved:
        assert Path(x["persisted"]["sidecar_path"]).is_file()
