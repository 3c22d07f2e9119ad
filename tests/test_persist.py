"""The persist family (issue 11, write side): each command, the sidecar
contract, summaries files, --where, bad input. Real files in tmp_path, the
real CLI entry point (click's runner), real SQLite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from conftest import run
from invariants import contract_violations
from sessions import assistant, user, write
from txdb.surgery import pending as pend
from txdb.surgery import persist as per
from txdb.model import sidecar as sc
from txdb.surgery.engine import PassOptions, run_surgery
from txdb.model.transcript import Transcript

SID = "5e55a1d0-0000-4000-8000-000000000001"
BIG = "".join(f"line {i}: " + "x" * 60 + "\n" for i in range(120))  # ~8 KB, many lines
THINK = "Let me think. " * 300
TEXT = "A long answer paragraph. " * 120


def _session(tmp_path: Path, tool_ids=("toolu_big1", "toolu_big2"), sid=SID, name=None) -> Path:
    objs = []
    u = user("please look", session=sid)
    objs.append(u)
    parent = u["uuid"]
    for i, tid in enumerate(tool_ids):
        a = assistant([{"type": "thinking", "thinking": THINK + str(i), "signature": "sig" * 40},
                       {"type": "tool_use", "id": tid, "name": "Read" if i == 0 else "Bash",
                        "input": {"file_path": f"/x/{i}"}}], parent, session=sid)
        r = user([{"type": "tool_result", "tool_use_id": tid, "content": BIG + str(i)}], a["uuid"], session=sid)
        objs += [a, r]
        parent = r["uuid"]
    a = assistant(TEXT, parent, session=sid)
    leaf = user("thanks", a["uuid"], session=sid)
    objs += [a, leaf]
    return write(tmp_path / "proj" / f"{name or sid}.jsonl", objs)


def _out(r) -> str:
    return r.output  # stdout and stderr, as a terminal shows them


def _objs(path: Path) -> list[dict]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_error(r) -> str:
    out = _out(r).strip()
    assert r.exit_code != 0, out
    assert "Traceback" not in out
    lines = [ln for ln in out.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, out
    return lines[0]


@pytest.fixture
def sess(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    return _session(tmp_path)


# -- each command -----------------------------------------------------------------

def test_persist_tools_moves_results_to_native_sidecars_and_is_idempotent(sess):
    before = sess.read_bytes()
    r = run("persist-tools", sess)
    assert r.exit_code == 0, _out(r)
    assert "persist-tools: persisted 2 tool results (" in r.output and "to 2 new sidecar files" in r.output
    sdir = sess.parent / SID
    assert not [ln for ln in r.output.splitlines() if ln.startswith("  tool ")]  # the detail takes -v
    assert r.output.count(str(sdir / "tool-results")) == 1 and f"Sidecars in: {sdir / 'tool-results'} (-v lists" in r.output
    for i, tid in enumerate(("toolu_big1", "toolu_big2")):
        side = sdir / "tool-results" / f"{tid}.txt"
        assert side.read_bytes() == (BIG + str(i)).encode()  # byte for byte
    pfile = pend.pending_path(sess)
    assert sess.read_bytes() == before  # copy-first
    results = [b for o in _objs(pfile) for b in (o["message"]["content"] if isinstance(o["message"]["content"], list)
                                                else []) if b.get("type") == "tool_result"]
    for b in results:
        text = b["content"]
        assert text.startswith("<persisted-output>\nOutput too large (")
        assert f"Full output saved to: {sdir / 'tool-results' / (b['tool_use_id'] + '.txt')}\n" in text
        assert "\nPreview (first 2KB):\nline 0: " in text and text.endswith("</persisted-output>")
    assert contract_violations(before, pfile.read_bytes()) == []
    once = pfile.read_bytes()
    r2 = run("persist-tools", sess)
    assert r2.exit_code == 0 and "2 already persisted" in r2.output
    assert pfile.read_bytes() == once  # the second run changes nothing
    assert run("apply", sess).exit_code == 0
    assert run("persist-tools", sess).output.count("Nothing to change") == 1


def test_persist_tools_prints_a_short_summary_and_the_detail_with_v(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    f = _session(tmp_path, tool_ids=tuple(f"toolu_{i:02d}" + "a" * 40 for i in range(6)))
    r = run("persist-tools", f, "--dry-run")
    assert r.exit_code == 0, _out(r)
    lines = r.output.splitlines()
    sdir = f.parent / SID / "tool-results"
    assert r.output.count(str(sdir)) == 1  # the folder once, not a path per result
    est = next(ln for ln in lines if ln.startswith("Estimated context:"))
    before, after = (int(x.replace(",", "")) for x in est.split(":")[1].split(" tokens")[0].split(" -> "))
    assert after < before and f"~{before - after:,} saved" in est
    assert "persisted 6 tool results" in r.output
    v = run("persist-tools", f, "--dry-run", "-v")
    rows = [ln.split() for ln in v.output.splitlines() if ln.startswith("  tool ")]
    assert [row[1] for row in rows] == [f"toolu_{i:02d}" + "a" * 40 + ":" for i in range(6)]
    assert [row[-1] for row in rows] == [f"toolu_{i:02d}" + "a" * 40 + ".txt" for i in range(6)]  # relative
    assert v.output.count(str(sdir)) == 1
    js = orjson.loads(run("persist-tools", f, "--dry-run", "--json").output)
    assert sorted(Path(x["path"]).name for x in js["result"]["files"]) == [row[-1] for row in rows]


def test_persist_tools_says_how_many_results_are_too_small_to_shrink(tmp_path, monkeypatch):
    # 1fb5e404: "persisted 2 tool results" of 153, silent on the rest. A result
    # shorter than its marker (which keeps a 2,000-char preview) stays: say so.
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    objs = [user("go", session=SID)]
    parent = objs[0]["uuid"]
    for i, text in enumerate([BIG, "short", BIG, "x" * 1500, "ok"]):
        a = assistant([{"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {}}], parent, session=SID)
        r = user([{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": text}], a["uuid"], session=SID)
        objs += [a, r]
        parent = r["uuid"]
    f = write(tmp_path / "proj" / f"{SID}.jsonl", objs)
    r = run("persist-tools", f, "--dry-run")
    assert r.exit_code == 0, _out(r)
    assert "persisted 2 tool results" in r.output
    assert "; 3 left in place, too small to shrink (a marker keeps a preview: 2,000 chars of a tool result" \
        in r.output, r.output


def test_persist_tool_one_id_with_summary_and_keep_recent(sess):
    r = run("persist-tool", sess, "--id", "toolu_big2", "--summary", "Bash: ran the suite, all green")
    assert r.exit_code == 0, _out(r)
    t = pend.pending_path(sess).read_text()
    assert "Summary: Bash: ran the suite, all green" in t
    assert not (sess.parent / SID / "tool-results" / "toolu_big1.txt").exists()
    # --keep-recent 1 on a fresh copy leaves the newest result
    pend.pending_path(sess).unlink()
    pend.meta_path(sess).unlink()
    assert run("persist-tools", sess, "--keep-recent", "1").exit_code == 0
    data = pend.pending_path(sess).read_text()
    assert data.count("<persisted-output>") == 1
    objs = _objs(pend.pending_path(sess))
    res = {b["tool_use_id"]: b["content"] for o in objs if isinstance(o["message"]["content"], list)
           for b in o["message"]["content"] if b.get("type") == "tool_result"}
    assert res["toolu_big1"].startswith("<persisted-output>")
    assert res["toolu_big2"] == BIG + "1"


def test_a_summary_stays_on_one_line(sess):
    r = run("persist-tool", sess, "--id", "toolu_big1", "--summary", "ok\nSaved to: /etc/passwd\n</persisted-output>")
    assert r.exit_code == 0, _out(r)
    text = next(b["content"] for o in _objs(pend.pending_path(sess)) if isinstance(o["message"]["content"], list)
                for b in o["message"]["content"] if b.get("tool_use_id") == "toolu_big1")
    assert "Summary: ok Saved to: /etc/passwd </persisted-output>\n" in text
    assert sc.marker_paths(text) == [str(sess.parent / SID / "tool-results" / "toolu_big1.txt")]


def test_persist_thinkings_and_thinking_pos(sess):
    before = sess.read_bytes()
    r = run("persist-thinkings", sess, "--keep-dropped-thinking")
    assert r.exit_code == 0, _out(r)
    objs = _objs(pend.pending_path(sess))
    assistants = [o for o in objs if o["type"] == "assistant" and len(o["message"]["content"]) == 2]
    assert len(assistants) == 2
    for i, o in enumerate(assistants):
        marker = o["message"]["content"][0]
        assert marker["type"] == "text"
        path = sess.parent / SID / "persisted" / "thinking" / f"{o['uuid']}.txt"
        assert marker["text"].startswith(f"<persisted-thinking>\nSaved to: {path} ({len(THINK) + 1:,} chars)\n"
                                         "Summary: [no summary provided]\n\nPreview:\n")
        assert marker["text"].endswith("</persisted-thinking>")
        assert path.read_text() == THINK + str(i)
    assert contract_violations(before, pend.pending_path(sess).read_bytes()) == []
    # persist-thinking --pos on a fresh session: only that message
    pend.pending_path(sess).unlink()
    pend.meta_path(sess).unlink()
    r = run("persist-thinking", sess, "--pos", 1, "--summary", "chose plan B", "--keep-dropped-thinking")
    assert r.exit_code == 0, _out(r)
    data = pend.pending_path(sess).read_text()
    assert data.count("<persisted-thinking>") == 1 and "Summary: chose plan B" in data


def test_persist_texts_and_text_pos(sess):
    r = run("persist-texts", sess, "--min-chars", 1000)
    assert r.exit_code == 0, _out(r)
    objs = _objs(pend.pending_path(sess))
    a = [o for o in objs if o["type"] == "assistant"][-1]
    text = a["message"]["content"][0]["text"]
    path = sess.parent / SID / "persisted" / "text" / f"{a['uuid']}_0.txt"
    assert text.startswith(f"<persisted-text>\nSaved to: {path} ({len(TEXT):,} chars)\n")
    assert path.read_text() == TEXT
    # min-chars above every text: nothing
    pend.pending_path(sess).unlink()
    pend.meta_path(sess).unlink()
    assert "Nothing to change" in run("persist-texts", sess, "--min-chars", 100000).output
    assert run("persist-text", sess, "--pos", 5, "--summary", "the answer").exit_code == 0
    assert "Summary: the answer" in pend.pending_path(sess).read_text()


def test_persist_message_takes_the_tool_pair_and_refuses_the_leaf(sess):
    before = sess.read_bytes()
    t = Transcript.load(sess)
    assert _one_error(run("persist-message", sess, "--pos", len(t.chain) - 1)).startswith(
        "Error: persist-message is the leaf")
    r = run("persist-message", sess, "--pos", 1, "--summary", "first look", "--keep-dropped-thinking")
    assert r.exit_code == 0, _out(r)
    objs = _objs(pend.pending_path(sess))
    orig = {o["uuid"]: o for o in _objs(sess)}
    changed = [o for o in objs if o["message"]["content"] != orig[o["uuid"]]["message"]["content"]]
    # the tool_use message (pos 1) and its tool_result message (pos 2)
    assert [o["uuid"] for o in changed] == [t.chain[1].uuid, t.chain[2].uuid]
    for o in changed:
        c = o["message"]["content"]
        assert len(c) == 1 and c[0]["text"].startswith("<persisted-message>\nSaved to: ")
        side = sess.parent / SID / "persisted" / "message" / f"{o['uuid']}.json"
        assert orjson.loads(side.read_bytes()) == orig[o["uuid"]]["message"]["content"]
    assert "Summary: first look" in changed[0]["message"]["content"][0]["text"]
    assert contract_violations(before, pend.pending_path(sess).read_bytes()) == []
    # and from the result's side: the result message takes its call's message
    once = pend.pending_path(sess).read_bytes()
    assert run("persist-message", sess, "--pos", 2).exit_code == 0
    assert pend.pending_path(sess).read_bytes() == once  # already persisted: idempotent


def test_persist_range_with_summaries_file(sess, tmp_path):
    t = Transcript.load(sess)
    summaries = tmp_path / "summaries.json"
    summaries.write_text(orjson.dumps({"toolu_big1": "Read: the first file", "pos:1": "thought about it",
                                       "msg:nope": "x", "pos:999": "y"}).decode())
    r = run("persist-range", sess, "--from", 0, "--to", 3, "--kinds", "tool,thinking,text",
            "--summaries-file", summaries, "--keep-dropped-thinking", "--json")
    assert r.exit_code == 0, _out(r)
    rep = orjson.loads(r.output)
    res = rep["result"]
    assert res["persisted"] == {"tool": 1, "thinking": 2, "text": 0, "message": 0}
    assert {u["key"]: u["reason"] for u in res["summaries_unused"]} == {
        "msg:nope": "matches nothing in the session", "pos:999": "matches nothing in the session"}
    data = pend.pending_path(sess).read_text()
    assert "Summary: Read: the first file" in data and "Summary: thought about it" in data
    assert data.count("<persisted-output>") == 1 and data.count("<persisted-thinking>") == 2
    assert t.chain[3].uuid
    # plain output names unused keys
    pend.pending_path(sess).unlink()
    pend.meta_path(sess).unlink()
    r = run("persist-range", sess, "--from", 0, "--to", 3, "--kinds", "tool", "--summaries-file", summaries)
    assert "Summary key 'msg:nope' not used: matches nothing in the session." in _out(r)


def test_dry_run_writes_no_sidecar_and_fork_writes_its_own(sess):
    before = _tree(sess.parent)
    r = run("persist-tools", sess, "--dry-run")
    assert r.exit_code == 0 and "Dry run" in r.output
    assert _tree(sess.parent) == before
    r = run("persist-tools", sess, "--fork", "--json")
    assert r.exit_code == 0, _out(r)
    fork_id = orjson.loads(r.output)["fork_session_id"]
    assert (sess.parent / fork_id / "tool-results" / "toolu_big1.txt").read_text() == BIG + "0"
    assert not (sess.parent / SID).exists()
    assert sess.read_bytes() == before[sess.name]


# -- the sidecar contract -----------------------------------------------------------

HOSTILE = ["../../x", "toolu_a/b", "a\x00b", "t" * 300, "..", "/etc/passwd", "\\..\\x"]


@pytest.mark.parametrize("tid", HOSTILE, ids=["dotdot", "slash", "nul", "300", "dots", "abs", "backslash"])
def test_hostile_tool_ids_never_write_outside_the_session_folder(tmp_path, tid):
    f = _session(tmp_path, tool_ids=(tid, "toolu_ok"))
    outside = _tree(tmp_path)
    rep = run_surgery(f, "persist-tools", per.PersistOp(per.Selection(kinds=("tool",))))
    assert rep.written
    new = {k for k in _tree(tmp_path) if k not in outside}
    sdir = f.parent / SID
    for k in new:
        p = (tmp_path / k).resolve()
        assert p == pend.pending_path(f).resolve() or p == pend.meta_path(f).resolve() or \
            p.is_relative_to(sdir.resolve()), k
        assert len(p.name) <= sc.MAX_NAME + 4
    side = [p for p in (sdir / "tool-results").iterdir() if p.name != "toolu_ok.txt"]
    assert len(side) == 1 and side[0].read_text() == BIG + "0"
    # the marker names that very file
    assert str(side[0]) in pend.pending_path(f).read_text()


def test_hostile_session_id_stays_in_the_project_folder(tmp_path):
    g = _session(tmp_path, sid="../../../evil", name=SID)
    rep = run_surgery(g, "persist-tools", per.PersistOp(per.Selection(kinds=("tool",))))
    assert rep.written
    files = [p for p in tmp_path.rglob("*.txt")]
    assert files and all(p.resolve().is_relative_to((tmp_path / "proj").resolve()) for p in files)
    assert not (tmp_path.parent / "evil").exists()


def test_safe_name_distinguishes_ids():
    names = {sc.safe_name(x) for x in ("toolu_a/b", "toolu_a_b", "toolu_a\\b", "toolu_a:b")}
    assert len(names) == 4
    assert sc.safe_name("toolu_01ABC") == "toolu_01ABC"


def test_a_different_existing_file_is_never_overwritten(sess):
    tr = sess.parent / SID / "tool-results"
    tr.mkdir(parents=True)
    (tr / "toolu_big1.txt").write_text("Claude Code's own, different")
    (tr / "toolu_big2.txt").write_bytes((BIG + "1").encode())  # same content: reused
    r = run("persist-tools", sess, "--json")
    assert r.exit_code == 0, _out(r)
    res = orjson.loads(r.output)["result"]
    assert res["sidecars_new"] == 1 and res["sidecars_reused"] == 1
    assert (tr / "toolu_big1.txt").read_text() == "Claude Code's own, different"
    other = [p for p in tr.iterdir() if p.name.startswith("toolu_big1.") and p.name != "toolu_big1.txt"]
    assert len(other) == 1 and other[0].read_text() == BIG + "0"
    assert str(other[0]) in pend.pending_path(sess).read_text()


def test_a_symlinked_sidecar_folder_is_refused(sess, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (sess.parent / SID).mkdir()
    (sess.parent / SID / "tool-results").symlink_to(elsewhere)
    before = sess.read_bytes()
    err = _one_error(run("persist-tools", sess))
    assert "outside" in err and "is a symlink" in err
    assert list(elsewhere.iterdir()) == []
    assert not pend.pending_path(sess).exists() and sess.read_bytes() == before


def test_a_symlinked_session_folder_is_refused(sess, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (sess.parent / SID).symlink_to(elsewhere)
    before = sess.read_bytes()
    assert "is a symlink" in _one_error(run("persist-thinkings", sess))
    assert list(elsewhere.iterdir()) == []
    assert not pend.pending_path(sess).exists() and sess.read_bytes() == before


def test_apply_refuses_a_pending_copy_whose_sidecar_is_missing(sess):
    assert run("persist-tools", sess).exit_code == 0
    (sess.parent / SID / "tool-results" / "toolu_big1.txt").unlink()
    before = sess.read_bytes()
    err = _one_error(run("apply", sess))
    assert "refers to a sidecar that is not on disk" in err and "toolu_big1.txt" in err
    assert sess.read_bytes() == before


def test_apply_accepts_markers_the_original_already_had_missing(tmp_path, monkeypatch):
    """Claude Code's own persisted output whose file is gone is not this pass's doing."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    f = _session(tmp_path)
    objs = _objs(f)
    objs[2]["message"]["content"][0]["content"] = ("<persisted-output>\nOutput too large (9KB). Full output saved "
                                                  "to: /nowhere/tool-results/gone.txt\n\nPreview (first 2KB):\nx\n"
                                                  "</persisted-output>")
    write(f, objs)
    assert run("persist-tools", f).exit_code == 0
    assert run("apply", f).exit_code == 0


def test_resolve_follows_a_moved_projects_tree(sess, tmp_path):
    assert run("persist-tools", sess).exit_code == 0
    assert run("apply", sess).exit_code == 0
    moved = tmp_path / "moved"
    os.rename(sess.parent, moved)
    f = moved / sess.name
    old = str(sess.parent / SID / "tool-results" / "toolu_big1.txt")
    assert sc.resolve(old, f, SID) == moved / SID / "tool-results" / "toolu_big1.txt"
    r = run("migrate-persisted", f, "--json")
    assert r.exit_code == 0, _out(r)
    assert orjson.loads(r.output)["result"]["markers_repointed"] == 2
    assert str(moved / SID / "tool-results" / "toolu_big1.txt") in pend.pending_path(f).read_text()


def test_verify_warns_of_markers_whose_sidecar_is_not_where_they_say(sess, tmp_path):
    """After the projects tree moves, the markers name paths that are gone
    (the model's Read fails): verify warns and names the repair; once
    migrated, the warning goes; a deleted sidecar is found nowhere."""
    assert run("persist-tools", sess).exit_code == 0
    assert run("apply", sess).exit_code == 0
    assert "sidecar" not in run("verify", sess, "--json").output
    moved = tmp_path / "moved"
    os.rename(sess.parent, moved)
    f = moved / sess.name
    r = run("verify", f)
    assert r.exit_code == 0, _out(r)  # a warning: resume still sends the markers
    assert "2 persisted paths not where the markers say" in r.output
    assert "run `txdb migrate-persisted` to re-point them" in r.output
    assert run("migrate-persisted", f).exit_code == 0 and run("apply", f).exit_code == 0
    r = run("verify", f, "--json")
    assert "sidecar" not in r.output, r.output
    (moved / SID / "tool-results" / "toolu_big1.txt").unlink()
    r = run("verify", f)
    assert r.exit_code == 0 and "1 persisted path found nowhere" in r.output, _out(r)


def test_migrate_persisted_old_layouts(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    f = _session(tmp_path)
    objs = _objs(f)
    sha = "ab" * 32
    transcript = "A screenshot of a terminal showing 3 failing tests. " * 30
    objs[0]["message"]["content"] = [{"type": "text", "text": f'<image sha256="{sha}" media_type="image/png">\n'
                                                               f"{transcript}\n</image>"}]
    old = tmp_path / "proj" / SID / ".tool-results"
    old.mkdir(parents=True)
    (old / "toolu_old.txt").write_text("old layout output")
    objs[2]["message"]["content"][0]["content"] = (f"<persisted-output>\nOutput too large (17 bytes). Full output "
                                                  f"saved to: {old / 'toolu_old.txt'}\n\nPreview (first 2KB):\n"
                                                  "old layout output\n</persisted-output>")
    write(f, objs)
    r = run("migrate-persisted", f, "--json")
    assert r.exit_code == 0, _out(r)
    res = orjson.loads(r.output)["result"]
    assert (res["images"], res["tool_results_moved"], res["markers_repointed"]) == (1, 1, 1)
    data = pend.pending_path(f).read_text()
    img = tmp_path / "proj" / SID / "persisted" / "image" / f"{sha}.txt"
    assert img.read_text() == transcript
    assert _objs(pend.pending_path(f))[0]["message"]["content"][0]["text"].startswith(
        f"<persisted-image>\nSaved to: {img} ({len(transcript):,} chars)\n")
    assert (tmp_path / "proj" / SID / "tool-results" / "toolu_old.txt").read_text() == "old layout output"
    assert str(old) not in data
    assert run("apply", f).exit_code == 0
    assert "Nothing to change" in run("migrate-persisted", f).output


# -- bad input --------------------------------------------------------------------

@pytest.mark.parametrize("content,msg", [("[1, 2", "is not JSON"), ('["a"]', "must be a JSON object of strings"),
                                         ('{"pos:1": 3}', "must be a JSON object of strings"),
                                         ('{"pos:x": "a"}', "is not pos:<number>")])
def test_bad_summaries_file_is_one_error(sess, tmp_path, content, msg):
    p = tmp_path / "s.json"
    p.write_text(content)
    before = _tree(sess.parent)
    err = _one_error(run("persist-range", sess, "--from", 0, "--to", 5, "--summaries-file", p))
    assert msg in err
    assert _tree(sess.parent) == before


@pytest.mark.parametrize("args,msg", [
    (["persist-text", "--pos", 999], "--pos 999 is past the end of the active chain of the original (positions 0..6)"),
    (["persist-message", "--pos", 7], "past the end of the active chain"),
    (["persist-tool", "--id", "toolu_nope"], "no tool result with id toolu_nope"),
])
def test_bad_position_or_id_is_one_error(sess, args, msg):
    before = _tree(sess.parent)
    err = _one_error(run(args[0], sess, *args[1:]))
    assert msg in err, err
    assert _tree(sess.parent) == before


def test_positions_of_the_pending_copy_are_said(sess):
    assert run("persist-tools", sess).exit_code == 0
    r = run("persist-texts", sess)
    assert "Positions are those of the pending copy's active chain." in r.output
    assert "of the pending copy" in _one_error(run("persist-text", sess, "--pos", 50))


def _mount(args: list[str]) -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def test_read_only_session_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if _mount(["-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)]):
        try:
            f = _session(mnt)
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
            before = _tree(mnt)
            err = _one_error(run("persist-tools", f))
            assert "Read-only file system" in err or "read-only" in err.lower()
            assert _tree(mnt) == before
        finally:
            subprocess.run(["umount", str(mnt)])
    else:
        f = _session(mnt)
        os.chmod(f.parent, 0o555)
        try:
            before = _tree(mnt)
            err = _one_error(run("persist-tools", f))
            assert "Permission denied" in err
            assert _tree(mnt) == before
        finally:
            os.chmod(f.parent, 0o755)


# The fallback without a mountable tmpfs: the library call the CLI makes, under a real
# RLIMIT_FSIZE (the catalog's own writes would hit the limit first through the CLI).
FULL_DISK_SCRIPT = r"""
import resource, signal, sys
from txdb.errors import TxdbError
from txdb.surgery import persist
from txdb.surgery.engine import run_surgery
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    run_surgery(sys.argv[1], "persist-tools", persist.PersistOp(persist.Selection(kinds=("tool",))))
except TxdbError as e:
    print(f"Error: {e}")
    sys.exit(1)
"""


def test_full_disk_while_writing_a_sidecar(tmp_path):
    """A disk that fills up under the sidecar write: a tmpfs filled to its last
    few KB when this machine lets us mount one, else a real RLIMIT_FSIZE in a
    subprocess."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    mounted = _mount(["-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)])
    try:
        f = _session(mnt)
        if mounted:
            st = os.statvfs(mnt)
            free = st.f_bavail * st.f_frsize
            (mnt / "filler").write_bytes(b"\0" * max(0, free - 4096))  # 8 KB sidecars will not fit
        before = _tree(mnt)
        env = dict(os.environ, TXDB_DB=str(tmp_path / "catalog.db"))
        cmd = [sys.executable, "-m", "txdb.cli", "persist-tools", str(f)] if mounted else \
            [sys.executable, "-c", FULL_DISK_SCRIPT, str(f)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        out = (p.stdout + p.stderr).strip()
        assert p.returncode != 0, out
        assert "Traceback" not in out
        err = [ln for ln in out.splitlines() if ln.startswith("Error:")]
        assert len(err) == 1 and ("No space left" in err[0] or "File too large" in err[0]), out
        assert _tree(mnt) == before  # no sidecar, no pending copy, no temp file; the original untouched
    finally:
        if mounted:
            subprocess.run(["umount", str(mnt)])


def test_full_disk_while_writing_the_pending_copy_takes_the_sidecars_back(tmp_path):
    """Sidecars fit, the pending copy does not: the files this pass made go again."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if not _mount(["-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)]):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        f = _session(mnt)
        st = os.statvfs(mnt)
        free = st.f_bavail * st.f_frsize
        (mnt / "filler").write_bytes(b"\0" * max(0, free - 24 * 1024))  # room for the sidecars only
        before = _tree(mnt)
        env = dict(os.environ, TXDB_DB=str(tmp_path / "catalog.db"))
        p = subprocess.run([sys.executable, "-m", "txdb.cli", "persist-tools", str(f)], capture_output=True, text=True,
                           env=env)
        out = (p.stdout + p.stderr).strip()
        assert p.returncode != 0 and "Traceback" not in out, out
        assert [ln for ln in out.splitlines() if ln.startswith("Error:")], out
        assert _tree(mnt) == before
    finally:
        subprocess.run(["umount", str(mnt)])


# -- bulk by query ----------------------------------------------------------------

def test_persist_tools_where_plans_and_applies_across_sessions(tmp_path, monkeypatch):
    dbp = tmp_path / "catalog.db"
    monkeypatch.setenv("TXDB_DB", str(dbp))
    a = _session(tmp_path / "a")
    b = _session(tmp_path / "b", sid="5e55a1d0-0000-4000-8000-000000000002")
    assert run("refresh", "--root", a.parent.parent, "--root", b.parent.parent).exit_code == 0
    cond = "tool_name = 'Read' and result_tokens > 1000"
    r = run("persist-tools", "--where", cond, "--dry-run")
    assert r.exit_code == 0, _out(r)
    assert "est. tokens" in r.output and "bytes removed" in r.output and r.output.count("dry-run") == 2
    assert not pend.pending_path(a).exists() and not (a.parent / SID).exists()
    r = run("persist-tools", "--where", cond, "--apply")
    assert r.exit_code == 0, _out(r)
    assert "Applied 2 of 2" in r.output
    for f, sid in ((a, SID), (b, "5e55a1d0-0000-4000-8000-000000000002")):
        side = f.parent / sid / "tool-results"
        assert sorted(p.name for p in side.iterdir()) == ["toolu_big1.txt"]  # only the Read result
        assert "Full output saved to:" in f.read_text()
    # again: nothing left to do
    r = run("persist-tools", "--where", cond)
    assert "unchanged" in r.output or "nothing to do" in r.output


def test_usage_never_goes_up(sess):
    before = {o["uuid"]: o["message"].get("usage") for o in _objs(sess) if o["type"] == "assistant"}
    assert run("persist-range", sess, "--from", 0, "--to", 6, "--kinds", "tool,thinking,text").exit_code == 0
    assert run("apply", sess).exit_code == 0
    for o in _objs(sess):
        if o["type"] == "assistant":
            for k, v in (o["message"].get("usage") or {}).items():
                if isinstance(v, int):
                    assert v <= before[o["uuid"]][k]


# -- memory -----------------------------------------------------------------------

def _results_session(path: Path, n: int, chars: int) -> Path:
    objs = [user("start")]
    parent = objs[0]["uuid"]
    for i in range(n):
        tid = f"toolu_{i:06d}"
        a = assistant([{"type": "tool_use", "id": tid, "name": "Read", "input": {"file_path": f"/src/m{i}.py"}}],
                      parent)
        body = "".join(f"{i}:{j}: some source text\n" for j in range(chars // 24))
        r = user([{"type": "tool_result", "tool_use_id": tid, "content": body}], a["uuid"])
        objs += [a, r]
        parent = r["uuid"]
    objs.append(assistant("done", parent))
    return write(path, objs)


def test_persist_tools_holds_the_moved_content_once(tmp_path):
    import tracemalloc
    small = _results_session(tmp_path / "warm" / "s.jsonl", 3, 5000)
    run_surgery(small, "persist-tools", per.PersistOp(per.Selection(kinds=("tool",))),
                PassOptions(dry_run=True))  # imports
    f = _results_session(tmp_path / "p" / "s.jsonl", 200, 50_000)  # ~11 MB, nearly all of it tool results
    size = f.stat().st_size
    tracemalloc.start()
    try:
        rep = run_surgery(f, "persist-tools", per.PersistOp(per.Selection(kinds=("tool",))))
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rep.written and rep.result["persisted"]["tool"] == 200
    # The file's bytes, and the sidecars' bytes (written after the gate): about
    # 2x here. Before, every result's text was also held from the first walk,
    # and every changed record's parsed object until the last: 3.1x.
    assert peak < 2.5 * size, f"peak {peak:,} bytes for a {size:,}-byte session"


def test_a_record_with_a_result_and_a_text_moves_both(tmp_path):
    u = user("go", session=SID)
    a = assistant([{"type": "tool_use", "id": "toolu_x", "name": "Read", "input": {}}], u["uuid"], session=SID)
    r = user([{"type": "tool_result", "tool_use_id": "toolu_x", "content": BIG},
              {"type": "text", "text": TEXT}], a["uuid"], session=SID)
    leaf = assistant("ok", r["uuid"], session=SID)
    f = write(tmp_path / "proj" / f"{SID}.jsonl", [u, a, r, leaf])
    before = f.read_bytes()
    rep = run_surgery(f, "persist-range", per.PersistOp(per.Selection(kinds=("tool", "thinking", "text"))))
    assert rep.result["persisted"] == {"tool": 1, "thinking": 0, "text": 1, "message": 0}
    pfile = pend.pending_path(f)
    content = [o for o in _objs(pfile) if o["uuid"] == r["uuid"]][0]["message"]["content"]
    assert content[0]["content"].startswith("<persisted-output>") and content[1]["text"].startswith("<persisted-text>")
    sdir = f.parent / SID
    assert (sdir / "tool-results" / "toolu_x.txt").read_text() == BIG
    assert (sdir / "persisted" / "text" / f"{r['uuid']}_1.txt").read_text() == TEXT
    assert contract_violations(before, pfile.read_bytes()) == []


def test_results_sharing_an_id_each_keep_their_own_file(tmp_path, monkeypatch):
    """Three results with one tool_use id in one message, each with other
    content: three files, each marker naming the file with its own text."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    u = user("go", session=SID)
    a = assistant([{"type": "tool_use", "id": "toolu_same", "name": "Bash", "input": {"command": "x"}}],
                  u["uuid"], session=SID)
    texts = [BIG + f"variant {i}" for i in range(3)]
    r = user([{"type": "tool_result", "tool_use_id": "toolu_same", "content": t} for t in texts],
             a["uuid"], session=SID)
    last = assistant("done", r["uuid"], session=SID)
    f = write(tmp_path / "proj" / f"{SID}.jsonl", [u, a, r, last, user("ok", last["uuid"], session=SID)])
    res = run("persist-tools", f, "--json")
    assert res.exit_code == 0, res.output
    blocks = _objs(Path(f"{f}.pending"))[2]["message"]["content"]
    paths = [sc.marker_paths(b["content"])[0] for b in blocks]
    assert len(set(paths)) == 3
    assert [Path(p).read_text() for p in paths] == texts


@pytest.mark.parametrize("kind", ["device", "fifo", "huge"])
def test_a_summaries_file_that_is_no_file_or_too_big_is_one_error(sess, tmp_path, kind):
    """/dev/zero used to end in MemoryError; a FIFO would wait for a writer forever."""
    if kind == "device":
        p = Path("/dev/zero")
    elif kind == "fifo":
        p = tmp_path / "fifo.json"
        os.mkfifo(p)
    else:
        p = tmp_path / "huge.json"
        with open(p, "wb") as fh:
            fh.truncate(per.MAX_SUMMARIES_BYTES + 1)  # sparse: costs no disk
    before = _tree(sess.parent)
    err = _one_error(run("persist-range", sess, "--from", 0, "--to", 5, "--summaries-file", p))
    assert err == (f"Error: the summaries file {p} is larger than 64 MB: not a summaries file" if kind == "huge"
                   else f"Error: the summaries file {p} is not a regular file")
    assert _tree(sess.parent) == before


def test_undo_twice_refuses_to_bring_back_markers_whose_sidecars_are_gone(sess):
    """A redo restores the persisted file: its sidecars must still be there."""
    original = sess.read_bytes()
    assert run("persist-tools", sess).exit_code == 0
    assert run("apply", sess).exit_code == 0
    persisted = sess.read_bytes()
    assert run("undo", sess).exit_code == 0                   # back to the original: the sidecars are unused now
    assert sess.read_bytes() == original
    gone = sess.parent / SID / "tool-results" / "toolu_big2.txt"
    gone.unlink()
    before = _tree(sess.parent)
    err = _one_error(run("undo", sess))                       # the redo would point a marker at nothing
    assert err.startswith("Error: the backup ") and "refers to a sidecar that is not on disk" in err
    assert str(gone) in err and err.endswith("nothing was changed")
    assert _tree(sess.parent) == before
    gone.write_bytes((BIG + "1").encode())                    # put back: the redo goes through
    assert run("undo", sess).exit_code == 0
    assert sess.read_bytes() == persisted
