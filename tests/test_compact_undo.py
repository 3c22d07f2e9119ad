"""compact --before N (a new session file) and undo (the last surgery's backup put back)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import orjson
import pytest

from conftest import run
from sessions import attachment, conversation, write
from txdb.model.transcript import Transcript

SID = "33333333-0000-0000-0000-000000000001"


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    proj = tmp_path / "claude" / "projects" / "-home-me-app"
    objs = conversation(6, session=SID)
    for i, o in enumerate(objs):
        if i >= 10:
            o["slug"] = "old-slug" if i < 14 else "brave-new-slug"
    write(proj / f"{SID}.jsonl", objs)
    return proj


def _objs(p: Path) -> list[dict]:
    return [orjson.loads(ln) for ln in p.read_bytes().splitlines()]


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_compact_before_writes_a_new_session(env, tmp_path):
    f = env / f"{SID}.jsonl"
    before = f.read_bytes()
    original = _objs(f)
    r = run("compact", f, "--before", 8, "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["written"] and rep["result"]["summarized"] == 8 and rep["result"]["kept"] == 16
    assert f.read_bytes() == before                                   # the original is untouched
    new = Path(rep["target"])
    assert new.parent == env and new.stem == rep["fork_session_id"] != SID
    objs = _objs(new)
    boundary, summary = objs[0], objs[1]
    assert boundary["type"] == "system" and boundary["subtype"] == "compact_boundary"
    assert boundary["parentUuid"] is None and boundary["compactMetadata"]["trigger"] == "manual"
    assert summary["isCompactSummary"] and summary["parentUuid"] == boundary["uuid"]
    text = summary["message"]["content"]
    assert "User: prompt 0" in text and "Assistant: done 1" in text and "prompt 2" not in text
    assert "echo 0" not in text and "out 0" not in text               # dialogue only: no tools
    t = Transcript.load(new)
    chain = [r.parse() for r in t.chain]
    assert len(chain) == 18 and chain[0]["uuid"] == boundary["uuid"]  # unbroken to the null root
    kept = chain[2:]
    assert [o["message"]["content"] for o in kept] == [o["message"]["content"] for o in original[8:]]
    old_uuids = {o["uuid"] for o in original}
    assert not old_uuids & {o["uuid"] for o in chain}                 # fresh uuids
    assert [o["forkedFrom"]["messageUuid"] for o in kept] == [o["uuid"] for o in original[8:]]
    assert {o.get("slug") for o in chain} == {"brave-new-slug"}       # one slug on every message
    assert all(_ts(o["timestamp"]) > _ts(boundary["timestamp"]) for o in chain[1:])
    assert {o["sessionId"] for o in objs if "sessionId" in o} == {new.stem}
    assert run("verify", new).exit_code == 0
    log = json.loads(run("query", "select command, path from surgeries", "--json").output)
    assert log == [{"command": "compact", "path": str(new)}]


def test_compact_stamps_its_boundary_and_summary_like_every_fork_record(env):
    """The spec puts forkedFrom and strippedBy on every envelope of a fork:
    the records compact creates too (their messageUuid: their own uuid)."""
    f = env / f"{SID}.jsonl"
    r = run("compact", f, "--before", 8, "--json")
    assert r.exit_code == 0, r.output
    objs = _objs(Path(json.loads(r.output)["target"]))
    chain = [o for o in objs if o.get("type") in ("user", "assistant", "attachment", "system")]
    assert chain and all(o["forkedFrom"]["sessionId"] == SID for o in chain)
    assert {(o["strippedBy"]["tool"], o["strippedBy"]["operation"]) for o in chain} == {("txdb", "compact")}
    assert len({o["strippedBy"]["at"] for o in chain}) == 1
    boundary, summary = objs[0], objs[1]
    assert boundary["forkedFrom"]["messageUuid"] == boundary["uuid"]
    assert summary["forkedFrom"]["messageUuid"] == summary["uuid"]


def test_compact_carries_the_state_records_of_the_cut_part(tmp_path, monkeypatch):
    """The system prompt and the announcements before the cut stay on the new
    chain (policy.is_state, the rule compact-range leaves in place), right
    after the summary; other attachments of the cut part go with it."""
    monkeypatch.setenv("TXDB_DB", str(tmp_path / "catalog.db"))
    objs = conversation(3, session=SID)
    skills = attachment({"type": "skill_listing", "content": "- txdb: ..."}, objs[3]["uuid"], session=SID)
    snap = attachment({"type": "prompt_snapshot", "systemPrompt": "You are..."}, skills["uuid"], session=SID)
    date = attachment({"type": "date_change", "newDate": "2026-11-02"}, snap["uuid"], session=SID)
    objs[4]["parentUuid"] = date["uuid"]
    f = write(tmp_path / "p" / f"{SID}.jsonl", objs[:4] + [skills, snap, date] + objs[4:])
    # positions: 0..3 turn 0, 4 skills, 5 snapshot, 6 date, 7..10 turn 1, 11..14 turn 2
    r = run("compact", f, "--before", 11, "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert (rep["result"]["summarized"], rep["result"]["kept_state"], rep["result"]["kept"]) == (9, 2, 4)
    chain = [x.parse() for x in Transcript.load(Path(rep["target"])).chain]
    assert [o.get("subtype") or o.get("isCompactSummary") for o in chain[:2]] == ["compact_boundary", True]
    assert [o["forkedFrom"]["messageUuid"] for o in chain[2:]] == [skills["uuid"], snap["uuid"]] + \
        [o["uuid"] for o in objs[8:]]
    assert chain[2]["attachment"] == skills["attachment"] and chain[3]["attachment"] == snap["attachment"]
    assert chain[2]["uuid"] != skills["uuid"] and chain[4]["parentUuid"] == chain[3]["uuid"]
    assert "2026-11-02" not in json.dumps(chain)                   # the date_change went with the summary
    assert "announcement and system-prompt records before the cut carried over" in \
        run("compact", f, "--before", 11, "--dry-run").output


def test_compact_refuses_bad_cuts(env):
    f = env / f"{SID}.jsonl"
    r = run("compact", f, "--before", 2)
    assert r.exit_code == 1 and "splits a tool call: the tool_result at position 2 answers the tool_use at " \
                               "position 1" in r.output
    r = run("compact", f, "--before", 0)
    assert r.exit_code == 1 and "--before 0 leaves nothing" in r.output
    r = run("compact", f, "--before", 24)
    assert r.exit_code == 1 and "past the end of the active chain (positions 0..23)" in r.output
    r = run("compact", f, "--before", 8, "--dry-run")
    assert r.exit_code == 0 and "Dry run" in r.output
    assert [p.name for p in env.iterdir()] == [f.name]                # nothing written


def test_undo_restores_the_backup_and_logs_it(env):
    f = env / f"{SID}.jsonl"
    original = f.read_bytes()
    assert run("strip-all", f, "--apply").exit_code == 0
    stripped = f.read_bytes()
    assert stripped != original
    r = run("undo", f, "--dry-run")
    assert r.exit_code == 0 and "#1 strip-all" in r.output and f.read_bytes() == stripped
    r = run("undo", f)
    assert r.exit_code == 0, r.output
    assert f.read_bytes() == original
    assert Path(str(f) + ".bak.1").read_bytes() == stripped           # the replaced file is kept
    log = json.loads(run("query", "select command, backup_path, result_size from surgeries order by id",
                         "--json").output)
    assert [x["command"] for x in log] == ["strip-all", "undo"]
    assert log[1]["backup_path"] == str(f) + ".bak.1" and log[1]["result_size"] == len(original)
    r = run("undo", f)                                                # undo again: the surgery again
    assert r.exit_code == 0 and f.read_bytes() == stripped


def test_undo_refuses_a_session_changed_since(env):
    f = env / f"{SID}.jsonl"
    assert run("strip-all", f, "--apply").exit_code == 0
    with open(f, "ab") as fh:
        fh.write(b'{"type":"last-prompt","leafUuid":null}\n')
    now = f.read_bytes()
    r = run("undo", f)
    assert r.exit_code == 1 and "grew by 39 bytes since surgery #1 (strip-all" in r.output
    assert f.read_bytes() == now and not Path(str(f) + ".bak.1").exists()
    f.write_bytes(now[:-39].replace(b"stripped by txdb", b"STRIPPED BY TXDB"))
    r = run("undo", f)
    assert r.exit_code == 1 and "is no longer the file surgery #1 (strip-all" in r.output


def test_undo_refusals(env):
    f = env / f"{SID}.jsonl"
    r = run("undo", f)
    assert r.exit_code == 1 and "no surgery of" in r.output and "nothing to undo" in r.output
    r = run("fork", f, "--json")
    fork = json.loads(r.output)["target"]
    r = run("undo", fork)
    assert r.exit_code == 1 and "delete the fork instead" in r.output and Path(fork).exists()
    assert run("strip-all", f, "--apply").exit_code == 0
    run("snapshot", f)
    r = run("undo", f)
    assert r.exit_code == 1 and "a pending copy" in r.output
    Path(str(f) + ".pending").unlink()
    Path(str(f) + ".pending.json").unlink()
    Path(str(f) + ".bak").unlink()
    r = run("undo", f)
    assert r.exit_code == 1 and "the backup of surgery #" in r.output and "is gone" in r.output


def test_undo_refuses_a_backup_that_does_not_verify(env):
    f = env / f"{SID}.jsonl"
    assert run("strip-all", f, "--apply").exit_code == 0
    bak = Path(str(f) + ".bak")
    objs = _objs(bak)
    objs[2]["message"]["content"][0]["tool_use_id"] = "toolu_nowhere"  # a tool_result with no tool_use
    bak.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))
    now = f.read_bytes()
    r = run("undo", f)                      # not the file the apply replaced
    assert r.exit_code == 1 and "is not the file surgery #1" in r.output and f.read_bytes() == now
    r = run("undo", f, "--force")           # --force waives that, never verify
    assert r.exit_code == 1 and "fails verify" in r.output and f.read_bytes() == now


def test_compact_a_repeated_tool_id_is_not_a_split(env):
    """Sessions glued by resume repeat tool ids: a result after the cut whose
    id also has a call after the cut is not cut off from it."""
    f = env / f"{SID}.jsonl"
    objs = _objs(f)
    tail = conversation(2, session=SID)                   # toolu_0000 and toolu_0001 again
    tail[0]["parentUuid"] = objs[-1]["uuid"]
    write(f, objs + tail)
    r = run("compact", f, "--before", 24, "--json")       # the second toolu_0000 call and result both after
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["result"]["kept"] == 8
    r = run("compact", f, "--before", 26)                 # splits the second toolu_0000 call from its result
    assert r.exit_code == 1 and "tool_result at position 26 answers the tool_use at position 25" in r.output
